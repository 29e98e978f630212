# Tune stage (issue 30): the parameters our families run with for a case, on the timing GPU type. The correctness,
# timing and ncu jobs of that case read the file, so all three run the configuration that is timed.
#   --config tune=committed (default): validate and copy config/tuned/<gpu>/<case>.yaml, in seconds, here
#   --config tune=search:              search on the GPU; diff the result against the committed file to re-tune


rule tune:
    output:
        yaml=f"{RESULTS}tuned/{{gpu}}/{{case}}/{{variant}}.yaml",
    log:
        f"{LOGS}tune/{{gpu}}/{{case}}/{{variant}}.log",
    params:
        overrides=shell_args(JOB_OVERRIDES),
        tuned=shell_args([f"variant.params.tune={TUNE}"]),
    threads: job_threads if TUNE == "search" else 1   # committed: no kernel runs
    localrule: TUNE != "search"
    priority: 2
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
        job_command("tune")
