# Correctness stage (SPEC §4): every scale x seed against the fp32 reference, on the correctness GPU type.
# One job per case x variant; the job entry writes the JSON atomically (status ok|unsupported|oom|error).


rule correctness:
    input:
        tuned=tuned_input,
    output:
        json=f"{RESULTS}correctness/{{gpu}}/{{case}}/{{variant}}.json",
    log:
        f"{LOGS}correctness/{{gpu}}/{{case}}/{{variant}}.log",
    params:
        overrides=shell_args(JOB_OVERRIDES),
        tuned=tuned_override,
    threads: job_threads
    # ready correctness jobs are scheduled before timing / ncu jobs: they fail fast, and where they run several
    # at a time (device_quick.sh) they fill the compile cache that the timing and ncu jobs, which run alone, reuse
    # (without it Snakemake 9 picked timing and ncu first once, compiling every tune candidate serially: 9 min)
    priority: 1
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
        job_command("correctness")
