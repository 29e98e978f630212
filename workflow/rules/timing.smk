# Timing stage (SPEC §6): median/p20/p80 with the same-process anchor, on the timing GPU type.
# One job per case x variant; the job entry writes the JSON atomically (status ok|unsupported|oom|error).


rule timing:
    output:
        json=RESULTS + "timing/{gpu}/{case}/{variant}.json",
    log:
        LOGS + "timing/{gpu}/{case}/{variant}.log",
    params:
        overrides=shell_args(OVERRIDES),
    threads: job_threads
    resources:
        slurm_partition=slurm("partition"),
        gres=slurm("gres"),
        constraint=slurm("constraint"),
        runtime=slurm("runtime", 60),
        mem_mb=slurm("mem_mb", 8000),
        cpus_per_task=slurm("cpus_per_task", 1),
    shell:
        job_command("timing")
