# The gated speedup report (SPEC §7) for the timing GPU type: reads result JSONs only, never runs a kernel.
# Timing comes from the timing GPU, the gate verdicts from the correctness GPU, the ncu table from the
# ncu GPU. Also wired into `snakemake --report` (captions in workflow/report/).


def report_inputs(wildcards):
    return {
        "correctness": stage_results("correctness"),
        "timing": [result("timing", wildcards.gpu, c, v) for c in MATRIX["cases"] for v in MATRIX["variants"]],
        "ncu": stage_results("ncu"),
    }


def report_args(wildcards) -> str:
    """Everything the report needs to know about the run, quoted for the shell."""
    args = ["--root", RESULTS.rstrip("/"), "--gpu", wildcards.gpu,
            "--correctness-gpu", MATRIX["stages"]["correctness"], "--ncu-gpu", MATRIX["stages"]["ncu"],
            "--cases", *MATRIX["cases"], "--variants", *MATRIX["variants"],
            "--variant-info", json.dumps({v: VARIANTS[v] for v in MATRIX["variants"]}),
            "--ceilings", json.dumps(gpu_config(wildcards.gpu)["ceilings"]),
            "--title", f"matrix {MATRIX['name']}" + (f", tag {TAG}" if TAG else "")]
    if OVERRIDES:
        args += ["--overrides", *OVERRIDES]
    return shell_args(args)


rule report:
    input:
        unpack(report_inputs),
    output:
        summary=report(RESULTS + "report/{gpu}/summary.csv", caption="../report/summary.rst",
                       category="Summary", labels={"gpu": "{gpu}", "file": "summary.csv"}),
        md=RESULTS + "report/{gpu}/report.md",
        html=report(RESULTS + "report/{gpu}/report.html", caption="../report/report_html.rst",
                    category="Summary", labels={"gpu": "{gpu}", "file": "report.html"}),
        bars=report(RESULTS + "report/{gpu}/speedup_bars.png", caption="../report/speedup_bars.rst",
                    category="Speedups", labels={"gpu": "{gpu}", "figure": "auto speedups"}),
        times=report(RESULTS + "report/{gpu}/time_per_case.png", caption="../report/time_per_case.rst",
                     category="Speedups", labels={"gpu": "{gpu}", "figure": "time per case"}),
        heatmap=report(RESULTS + "report/{gpu}/error_heatmap.png", caption="../report/error_heatmap.rst",
                       category="Correctness", labels={"gpu": "{gpu}", "figure": "error over tolerance"}),
        roofline=report(RESULTS + "report/{gpu}/roofline.png", caption="../report/roofline.rst",
                        category="Roofline", labels={"gpu": "{gpu}", "figure": "roofline"}),
    log:
        LOGS + "report/{gpu}.log",
    params:
        args=report_args,
        out_dir=lambda wildcards: report_dir(wildcards.gpu),
    localrule: True
    resources:
        runtime=10,
        mem_mb=4000,
    shell:
        f"{shlex.quote(sys.executable)} -m workflow.report --out-dir {{params.out_dir:q}} {{params.args}} "
        "> {log:q} 2>&1"
