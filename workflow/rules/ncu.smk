# Nsight Compute stage: one prepared call after warm-up profiled (workflow/stages/ncu.py); the .ncu-rep
# lands next to the JSON (its path is in the JSON: a variant that cannot run a case has no report).
# One job per case x ncu variant (config/matrix: ncu_variants); the job entry writes the JSON atomically (status ok|unsupported|oom|error).


rule ncu:
    input:
        tuned=tuned_input,
    output:
        json=f"{RESULTS}ncu/{{gpu}}/{{case}}/{{variant}}.json",
    log:
        f"{LOGS}ncu/{{gpu}}/{{case}}/{{variant}}.log",
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
        job_command("ncu")
