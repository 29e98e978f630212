# Timing stage (SPEC §6): median/p20/p80 with the same-process anchor, on the timing GPU type.
# One job per case x variant; the job entry writes the JSON atomically (status ok|unsupported|oom|error).


rule timing:
    input:
        tuned=tuned_input,
    output:
        json=f"{RESULTS}timing/{{gpu}}/{{case}}/{{variant}}.json",
    log:
        f"{LOGS}timing/{{gpu}}/{{case}}/{{variant}}.log",
    params:
        overrides=shell_args(JOB_OVERRIDES),
        tuned=tuned_override,
    threads: job_threads
    conda:
        "../envs/pipeline.yaml"
    resources:
        slurm_partition=slurm("partition"),
        gres=slurm("gres"),
        constraint=slurm("constraint"),
        runtime=slurm("runtime", 60),
        mem_mb=slurm("mem_mb", 8000),
        cpus_per_task=slurm("cpus_per_task", 1),
    shell:
        job_command("timing")
