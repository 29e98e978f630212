# Helpers that read the config: the matrix (Hydra, config/matrix/*.yaml), GPU types (config/gpu/*.yaml),
# user overrides, output paths. Rules reach config only through the functions defined here.
#
# Snakemake --config keys (all optional):
#   matrix=auto|full|quick|smoke|<name>   config/matrix/<name>.yaml; auto = full on a machine with a GPU
#                                         (stages on gpu=local), smoke on a CPU-only machine
#   gpu=<type>                            one GPU type for every stage (e.g. gpu=h200 on a local H200)
#   cases=[...] / variants=[...]          replace the matrix's case / variant selection
#   ncu=true|false                        add / drop the ncu stage (default: the matrix's ncu_variants)
#   ncu_variants=[...]                    replace the matrix's ncu_variants (those among the run's variants)
#   overrides=[...]                       Hydra overrides for every job (results under outputs/tag/<tag>/; which
#                                         overrides are tagged: workflow/tags.py, the same rule as a job by hand)
#   tag=<name>                            the tag of an override run (default: derived from the overrides)
#
# Existing results of the run that fail validation (workflow/schemas.py: unreadable, not a record, failing their
# schema, another run's tag) are moved aside to <file>.invalid when the workflow is read, so the run regenerates
# them. With keep-going (profiles/default), a run where a job failed still builds its report (onerror, report.smk).
#   tune=committed|search|off             where our families' parameters come from (the tune stage): the committed
#                                         config/tuned/<gpu>/<case>.yaml (default), a search on the timing GPU, or
#                                         exactly the variant config's parameters

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

REPO = Path(workflow.basedir)
CONFIG_DIR = REPO / "config"
STAGES = ("correctness", "timing", "ncu")
TUNE_MODES = ("committed", "search", "off")
TUNED_IMPLS = ("auto", "seqres", "hybrid", "dag")  # variants whose jobs read the tune stage's file
BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # kernels/ and workflow/ importable from the Snakefile

from workflow.tags import (RESERVED_KEYS, changes_config, check_tag, derive_tag, override_key,  # noqa: E402
                           tagged_overrides)


# ---------------------------------------------------------------- Hydra


def _hydra():
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="snakemake")


def compose(overrides):
    """The job entry's config (config/config.yaml) composed with ``overrides``; Hydra's own errors."""
    from hydra import compose as _compose

    _hydra()
    return _compose(config_name="config", overrides=list(overrides))


def hydra_error(e: Exception) -> str:
    msg = str(e).strip()
    if e.__cause__ is not None and str(e.__cause__).strip() not in msg:
        msg += f"\n  ({str(e.__cause__).strip()})"
    return msg


# ---------------------------------------------------------------- names from the config tree


def config_names(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def _yaml(path: Path) -> dict:
    import yaml

    with open(path) as f:
        return yaml.safe_load(f) or {}


def case_names(smoke: bool) -> list[str]:
    """Case configs (config/case/*.yaml), in file order, filtered by their ``smoke`` flag."""
    from kernels import list_cases

    return list_cases(smoke=smoke)


def variant_table() -> dict[str, dict]:
    """Every variant config that the kernels registry can run: name -> {impl, kind, gated_peer}.

    A config whose ``impl`` is not registered (its code has not landed) is left out with a warning."""
    from kernels import get_variant, list_variants

    registered = list_variants()
    table, missing = {}, []
    for name in config_names("variant"):
        impl = _yaml(CONFIG_DIR / "variant" / f"{name}.yaml").get("impl", name)
        if impl not in registered:
            missing.append(f"{name} (impl {impl})")
            continue
        v = get_variant(impl)
        table[name] = {"impl": impl, "kind": v.kind, "gated_peer": bool(v.gated_peer and v.kind == "peer")}
    if missing:
        print(f"workflow: warning: variant configs with no registered implementation, left out: "
              f"{', '.join(missing)}", file=sys.stderr)
    # peers first, in registry order (eager, eager_sdpa, nn, compile_...), then ours
    order = {impl: i for i, impl in enumerate(registered)}
    return dict(sorted(table.items(), key=lambda kv: (kv[1]["kind"] != "peer", order[kv[1]["impl"]], kv[0])))


ALL_CASES = config_names("case")
VARIANTS = variant_table()
GPU_TYPES = config_names("gpu")


# ---------------------------------------------------------------- the matrix


def gpu_visible() -> bool:
    """A CUDA GPU on this machine (nvidia-smi, else torch)?"""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            if r.returncode == 0 and "GPU" in r.stdout:
                return True
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _as_list(value, what: str) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            import yaml

            value = yaml.safe_load(s)
        else:
            return [x for x in re.split(r"[,\s]+", s) if x]
    if not isinstance(value, (list, tuple)):
        raise WorkflowError(f"config {what}: expected a list, got {value!r}")
    return [str(x) for x in value]


def expand_cases(sel) -> list[str]:
    """``all`` (every full-size case) | ``smoke`` | a list of case names."""
    if isinstance(sel, str) and sel in ("all", "full"):
        return case_names(smoke=False)
    if isinstance(sel, str) and sel == "smoke":
        return case_names(smoke=True)
    out = []
    for c in _as_list(sel, "cases"):
        if c in ("all", "full", "smoke"):
            out += expand_cases(c)
        elif c in ALL_CASES:
            out.append(c)
        else:
            raise WorkflowError(f"unknown case {c!r} in the matrix; valid: {', '.join(ALL_CASES)} "
                                "(or all | smoke)")
    return list(dict.fromkeys(out))


def expand_variants(sel) -> list[str]:
    """``all`` | ``peers`` | ``ours`` | ``peers+ours`` | a list of variant config names (keywords allowed)."""
    if isinstance(sel, str) and not sel.strip().startswith("["):
        items = sel.split("+")
    else:
        items = _as_list(sel, "variants")
    kinds = {"peers": "peer", "ours": "ours"}
    out = []
    for v in (x.strip() for x in items):
        if v == "all":
            out += list(VARIANTS)
        elif v in kinds:
            out += [n for n, t in VARIANTS.items() if t["kind"] == kinds[v]]
        elif v in VARIANTS:
            out.append(v)
        else:
            raise WorkflowError(f"unknown or unregistered variant {v!r} in the matrix; valid: "
                                f"{', '.join(VARIANTS)} (or all | peers | ours)")
    return list(dict.fromkeys(out))


def config_bool(value, key: str):
    """A --config switch: true/false (yes/no, on/off, 1/0) or None when not given; anything else is an error."""
    if value is None or isinstance(value, bool):
        return value
    try:
        return BOOLS[str(value).strip().lower()]
    except KeyError:
        raise WorkflowError(f"config {key}={value!r}: expected true or false") from None


def load_matrix(cfg: dict) -> dict:
    """The run's matrix: Hydra composes config/matrix/<name>.yaml; --config keys then refine it."""
    from omegaconf import OmegaConf

    name = str(cfg.get("matrix", "auto"))
    local_gpu = False
    if name == "auto":
        local_gpu = gpu_visible()
        name = "full" if local_gpu else "smoke"
    try:
        m = OmegaConf.to_container(compose(["{}matrix={}".format("+", name)]).matrix, resolve=True)
    except Exception as e:  # Hydra names the valid matrices
        raise WorkflowError(f"matrix={name}: {hydra_error(e)}") from None
    stages = dict(m.get("stages") or {})
    if cfg.get("gpu"):
        stages = {s: str(cfg["gpu"]) for s in STAGES}
    elif local_gpu:  # matrix=auto on a GPU machine: everything runs here
        stages = {s: "local" for s in STAGES}
    for s in STAGES:
        if stages.get(s) not in GPU_TYPES:
            raise WorkflowError(f"matrix {name}: stage {s} on unknown GPU type {stages.get(s)!r}; "
                                f"valid: {', '.join(GPU_TYPES)} (config/gpu/*.yaml)")
    cases = expand_cases(cfg["cases"] if "cases" in cfg else m.get("cases", "all"))
    variants = expand_variants(cfg["variants"] if "variants" in cfg else m.get("variants", "all"))
    nv = cfg["ncu_variants"] if "ncu_variants" in cfg else m.get("ncu_variants")
    ncu_variants = [v for v in expand_variants(nv) if v in variants] if nv else []
    ncu = config_bool(cfg.get("ncu", None), "ncu")
    if ncu is False:
        ncu_variants = []
    elif ncu is not None and not ncu_variants:
        ncu_variants = [v for v in ("auto",) if v in variants]
    job_overrides = [str(o) for o in (m.get("job_overrides") or [])]
    return {"name": name, "cases": cases, "variants": variants, "stages": stages,
            "ncu_variants": ncu_variants, "job_overrides": job_overrides}


# ---------------------------------------------------------------- overrides and the tag


def parse_overrides(value) -> list[str]:
    """``--config overrides='["a=1","b=2"]'`` (a YAML list) or one override as a plain string."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        if value.strip().startswith("["):
            import yaml

            value = yaml.safe_load(value)
        else:
            value = [value]
    if not isinstance(value, (list, tuple)):
        raise WorkflowError(f"config overrides: expected a list of Hydra overrides, got {value!r}")
    ovs = [str(o) for o in value]
    for ov in ovs:
        key = override_key(ov)
        if "=" not in ov and not ov.startswith("~"):
            raise WorkflowError(f"override {ov!r} is not key=value (Hydra syntax, e.g. variant.params.num_warps=4)")
        if key in RESERVED_KEYS or key.startswith("hydra"):
            raise WorkflowError(f"override {ov!r}: {key} is chosen by the workflow for every job; "
                                "use --config cases=/variants=/gpu=/matrix= to select it")
    return ovs


def shell_args(args) -> str:
    """Arguments quoted for the shell: metacharacters arrive literally in the job, never executed."""
    return " ".join(shlex.quote(str(a)) for a in args)


def validate_overrides(overrides: list[str], variants: list[str], cases: list[str], stages: dict) -> None:
    """Compose every variant of the run with the overrides once, before any job: Hydra's message on failure."""
    if not overrides:
        return
    case = cases[0] if cases else "smoke1"
    for v in variants:
        try:
            compose([f"variant={v}", f"case={case}", f"gpu={stages['timing']}", *overrides])
        except Exception as e:
            raise WorkflowError(
                f"override(s) {overrides} rejected for variant {v}:\n{hydra_error(e)}\n"
                "An override that only some variants have (e.g. variant.params.num_warps) needs a run "
                "restricted to them: --config variants='[seqres]'.") from None


def run_tag(overrides: list[str], matrix: dict) -> str:
    """The run's tag: --config tag=, else derived from the overrides (workflow/tags.py, the job entry's rule: none
    when they change no job's config)."""
    tag = str(config.get("tag") or "")
    tagged = tagged_overrides(overrides)
    if not tag and tagged:
        sel = [f"case={matrix['cases'][0] if matrix['cases'] else 'smoke1'}", f"gpu={matrix['stages']['timing']}",
               *matrix["job_overrides"]]
        changed = any(changes_config(compose, [f"variant={v}", *sel], tagged) for v in matrix["variants"])
        tag = derive_tag(tagged) if changed else ""
    try:
        return check_tag(tag) if tag else ""
    except ValueError as e:
        raise WorkflowError(str(e)) from None


OVERRIDES = parse_overrides(config.get("overrides", []))
MATRIX = load_matrix(config)
TUNE = str(config.get("tune", "committed"))
if TUNE not in TUNE_MODES:
    raise WorkflowError(f"tune={TUNE!r}: valid {', '.join(TUNE_MODES)} (committed: config/tuned/<gpu>/<case>.yaml; "
                        "search: search on the timing GPU; off: the variant config's parameters as they are)")
# what every job gets: the matrix's own job_overrides (part of its definition, no tag), then the user's
JOB_OVERRIDES = MATRIX["job_overrides"] + OVERRIDES
validate_overrides(JOB_OVERRIDES, MATRIX["variants"], MATRIX["cases"], MATRIX["stages"])
TAG = run_tag(OVERRIDES, MATRIX)
RESULTS_ROOT = f"outputs/tag/{TAG}" if TAG else "outputs"
RESULTS = f"{RESULTS_ROOT}/"  # every result path starts with this
LOGS = f"{RESULTS}logs/"


# ---------------------------------------------------------------- GPU types -> Slurm resources


_GPU_CACHE = {}


def gpu_config(gpu: str) -> dict:
    """config/gpu/<gpu>.yaml composed with the run's overrides (gpu.ceilings.* and gpu.slurm.* included)."""
    if gpu not in _GPU_CACHE:
        from omegaconf import OmegaConf

        gov = [o for o in JOB_OVERRIDES if override_key(o).startswith("gpu.")]
        _GPU_CACHE[gpu] = OmegaConf.to_container(compose([f"gpu={gpu}", *gov]).gpu, resolve=True)
    return _GPU_CACHE[gpu]


def slurm(field: str, default=None):
    """A resource function: ``gpu.slurm.<field>`` of the job's GPU type (None = not requested)."""

    def get(wildcards):
        v = gpu_config(wildcards.gpu)["slurm"].get(field)
        return default if v is None else v

    return get


def job_threads(wildcards):
    """A GPU job takes every local core, so a local run never times two GPU jobs at once
    (on Slurm, cpus_per_task is what sbatch asks for)."""
    return workflow.cores if gpu_config(wildcards.gpu)["device"] == "cuda" else 1


# ---------------------------------------------------------------- paths


def result(stage: str, gpu: str, case: str, variant: str) -> str:
    return f"{RESULTS}{stage}/{gpu}/{case}/{variant}.json"


def is_tuned(variant: str) -> bool:
    return TUNE != "off" and VARIANTS.get(variant, {}).get("impl") in TUNED_IMPLS


def tuned(gpu: str, case: str, variant: str) -> str:
    return f"{RESULTS}tuned/{gpu}/{case}/{variant}.yaml"


def tuned_input(wildcards) -> list[str]:
    """The tune stage's file a job of ours reads: the *timing* GPU type's, so the correctness, timing and ncu
    jobs of a case all run the configuration that is timed."""
    if not is_tuned(wildcards.variant):
        return []
    return [tuned(MATRIX["stages"]["timing"], wildcards.case, wildcards.variant)]


def tuned_override(wildcards, input) -> str:
    """The Hydra override that points a job of ours at its tuned file (tune=off: run the parameters as given)."""
    impl = VARIANTS.get(wildcards.variant, {}).get("impl")
    if impl not in TUNED_IMPLS:
        return ""
    if TUNE == "off":
        return shell_args(["variant.params.tune=off"])
    return shell_args([f"variant.params.tuned_file={input.tuned[0]}"])


def stage_results(stage: str, cases=None) -> list[str]:
    if stage == "ncu" and not MATRIX["ncu_variants"]:
        return []
    variants = MATRIX["ncu_variants"] if stage == "ncu" else MATRIX["variants"]
    return [result(stage, MATRIX["stages"][stage], c, v) for c in (cases or MATRIX["cases"]) for v in variants]


REPORT_FILES = ["summary.csv", "report.md", "report.html", "speedup_bars.png", "time_per_case.png",
                "error_heatmap.png", "roofline.png"]


def report_dir(gpu: str) -> str:
    return f"{RESULTS}report/{gpu}"


def all_targets() -> list[str]:
    out = stage_results("correctness") + stage_results("timing") + stage_results("ncu")
    out += [f"{report_dir(MATRIX['stages']['timing'])}/{f}" for f in REPORT_FILES]
    return out


def case_targets(case: str) -> list[str]:
    """Everything about one case: its correctness, timing (and ncu) results for the matrix's variants."""
    return stage_results("correctness", [case]) + stage_results("timing", [case]) + stage_results("ncu", [case])


def job_command(stage: str) -> str:
    """The shell command of one stage job; wildcards/output/log are filled in by Snakemake. ``+matrix=`` tells the
    job which overrides are its matrix's own (not tagged, workflow/tags.py)."""
    tag = f" tag={shlex.quote(TAG)}" if TAG else ""
    out = "{output.yaml:q}" if stage == "tune" else "{output.json:q}"
    matrix = shell_args(["{}matrix={}".format("+", MATRIX["name"])])  # (format: for the linter)
    return (f"{shlex.quote(sys.executable)} -m workflow.run stage={stage} case={{wildcards.case}} "
            f"variant={{wildcards.variant}} gpu={{wildcards.gpu}} out={out}{tag} {matrix} "
            "{params.overrides} {params.tuned} > {log:q} 2>&1")


# ---------------------------------------------------------------- results that fail validation


def quarantine_invalid() -> list[tuple[str, str]]:
    """This run's existing results that fail validation (``workflow/schemas.py``: unreadable, truncated, not a
    record, failing their schema, another case's / variant's / GPU type's, another run's tag) are moved aside to
    ``<file>.invalid``, so the run regenerates them. Returns (path, why) of each."""
    from workflow.schemas import InvalidResult, check_file

    moved = []
    for stage in STAGES:
        gpu = MATRIX["stages"][stage]
        variants = MATRIX["ncu_variants"] if stage == "ncu" else MATRIX["variants"]
        for case in MATRIX["cases"]:
            for variant in variants:
                path = Path(result(stage, gpu, case, variant))
                try:
                    check_file(path, stage, gpu=gpu, case=case, variant=variant, tag=TAG)
                except FileNotFoundError:
                    continue
                except InvalidResult as e:
                    os.replace(path, path.with_name(f"{path.name}.invalid"))
                    moved.append((str(path), str(e)))
    for path, why in moved:
        print(f"workflow: {path} is invalid ({why}): moved aside to {path}.invalid; this run regenerates it",
              file=sys.stderr)
    return moved


if getattr(workflow, "is_main_process", True):  # (not again inside each job a cluster executor starts)
    quarantine_invalid()


# ---------------------------------------------------------------- the report's inputs and arguments


def report_inputs(wildcards):
    return {
        "correctness": stage_results("correctness"),
        "timing": [result("timing", wildcards.gpu, c, v) for c in MATRIX["cases"] for v in MATRIX["variants"]],
        "ncu": stage_results("ncu"),
    }


def report_args(wildcards) -> str:
    """Everything the report needs to know about the run, quoted for the shell."""
    args = ["--root", RESULTS_ROOT, "--gpu", wildcards.gpu,
            "--correctness-gpu", MATRIX["stages"]["correctness"],
            "--cases", *MATRIX["cases"], "--variants", *MATRIX["variants"],
            "--variant-info", json.dumps({v: VARIANTS[v] for v in MATRIX["variants"]}),
            "--ceilings", json.dumps(gpu_config(wildcards.gpu)["ceilings"]),
            "--title", f"matrix {MATRIX['name']}" + (f", tag {TAG}" if TAG else "")]
    args += ["--tag", TAG]
    if MATRIX["ncu_variants"]:
        args += ["--ncu-gpu", MATRIX["stages"]["ncu"]]
    if JOB_OVERRIDES:
        args += ["--overrides", *JOB_OVERRIDES]
    return shell_args(args)


def build_reports_after_failure(log) -> None:
    """``onerror`` (report.smk): a run where some job failed (keep-going: every other job ran) still gets the report
    of what exists; the failed jobs' results are listed as missing, each with the error from its log."""
    try:
        pending = [j for j in workflow.dag.needrun_jobs() if j.rule.name == "report"]
    except Exception as e:  # noqa: BLE001 - Snakemake internals; the run has failed already
        print(f"workflow: no report after the failure ({e})", file=sys.stderr)
        return
    for job in pending:
        wc = job.wildcards
        out, log_path = report_dir(wc.gpu), Path(f"{LOGS}report/{wc.gpu}.log")
        cmd = [sys.executable, "-m", "workflow.report", "--out-dir", out, *shlex.split(report_args(wc))]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=os.getcwd()).returncode
        print(f"workflow: some jobs failed; the report of the results that exist is in {out}/ (failed jobs listed "
              f"under Missing results; report log {log_path}, exit {rc})", file=sys.stderr)


wildcard_constraints:
    gpu="|".join(map(re.escape, GPU_TYPES)),
    case="|".join(map(re.escape, ALL_CASES)),
    variant="|".join(map(re.escape, config_names("variant"))),
