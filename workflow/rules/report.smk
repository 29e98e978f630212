# The gated speedup report (SPEC §7) for the timing GPU type: reads result JSONs only, never runs a kernel.
# Timing comes from the timing GPU, the gate verdicts from the correctness GPU, the ncu table from the
# ncu GPU. Also wired into `snakemake --report` (captions in workflow/report/).


rule report:
    input:
        unpack(report_inputs),
    output:
        summary=report(f"{RESULTS}report/{{gpu}}/summary.csv", caption="../report/summary.rst",
                       category="Summary", labels={"gpu": "{gpu}", "file": "summary.csv"}),
        md=f"{RESULTS}report/{{gpu}}/report.md",
        html=report(f"{RESULTS}report/{{gpu}}/report.html", caption="../report/report_html.rst",
                    category="Summary", labels={"gpu": "{gpu}", "file": "report.html"}),
        bars=report(f"{RESULTS}report/{{gpu}}/speedup_bars.png", caption="../report/speedup_bars.rst",
                    category="Speedups", labels={"gpu": "{gpu}", "figure": "auto speedups"}),
        times=report(f"{RESULTS}report/{{gpu}}/time_per_case.png", caption="../report/time_per_case.rst",
                     category="Speedups", labels={"gpu": "{gpu}", "figure": "time per case"}),
        heatmap=report(f"{RESULTS}report/{{gpu}}/error_heatmap.png", caption="../report/error_heatmap.rst",
                       category="Correctness", labels={"gpu": "{gpu}", "figure": "error over tolerance"}),
        roofline=report(f"{RESULTS}report/{{gpu}}/roofline.png", caption="../report/roofline.rst",
                        category="Roofline", labels={"gpu": "{gpu}", "figure": "roofline"}),
    log:
        f"{LOGS}report/{{gpu}}.log",
    params:
        args=report_args,
        out_dir=lambda wildcards: report_dir(wildcards.gpu),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    resources:
        runtime=10,
        mem_mb=4000,
    shell:
        f"{shlex.quote(sys.executable)} -m workflow.report --out-dir {{params.out_dir:q}} {{params.args}} "
        "> {log:q} 2>&1"


# keep-going (profiles/default) runs every job it can; when one failed, the report rule's inputs are incomplete and
# Snakemake skips it: build the report of what exists anyway, listing the failed jobs (common.smk).
onerror:
    build_reports_after_failure(log)
