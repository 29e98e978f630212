"""Schemas (pydantic) of the job config's checked sections and of the result records (issue 32).

Every result JSON is validated when the job entry writes it (``validate_record``) and when the report or the
workflow reads it (``check_file``): a record that is not an object, lacks a field the report reads, contradicts
itself (``passed`` true while a scale x seed check failed, results that do not cover the configured scales x seeds,
timing quantiles out of order) or sits at a path that is not its own (another case, variant, GPU type, stage or tag)
is invalid, and is never counted.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, model_validator

SCHEMA = {"correctness": "mkh.correctness/1", "timing": "mkh.timing/1", "ncu": "mkh.ncu/1"}
STATUSES = ("ok", "unsupported", "oom", "error")


class InvalidResult(ValueError):
    """A result file that is unreadable or fails its schema; the message says why in one line."""


def _short(e: ValidationError, n: int = 3) -> str:
    errs = e.errors()
    parts = [f"{'.'.join(map(str, x['loc'])) or '(record)'}: {x['msg'].removeprefix('Value error, ')}"
             for x in errs[:n]]
    return "; ".join(parts) + (f" (+{len(errs) - n} more)" if len(errs) > n else "")


# ---------------------------------------------------------------- the job config (checked before any work)


class _Cfg(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class MarginCfg(_Cfg):
    enabled: StrictBool
    kinds: list[Literal["ours", "peer"]]
    bound: float = Field(gt=0)
    inputs: StrictInt = Field(ge=0)
    input_seed: StrictInt
    weight_seed_offsets: list[StrictInt]
    inputs_per_weight_seed: StrictInt = Field(ge=0)
    ref_batch: StrictInt = Field(ge=1)
    resume: StrictBool = True


class GateCfg(_Cfg):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    scales: list[float] = Field(min_length=1)
    seeds: list[StrictInt] = Field(min_length=1)
    margin: MarginCfg | None = None


class TimingCfg(_Cfg):
    warmup_calls: StrictInt = Field(ge=0)
    warmup_ms: float = Field(ge=0)
    reps: StrictInt = Field(ge=1)
    flush_l2_mb: StrictInt = Field(ge=0)
    rotate_inputs: StrictInt = Field(ge=1)
    input_scale: float
    input_seed: StrictInt
    anchor: StrictStr | None
    anchor_reps: StrictInt = Field(ge=1)
    clock_drift_mhz: float = Field(ge=0)
    wall_ratio_bound: float = Field(ge=0)
    wall_reps: StrictInt = Field(ge=1)


class NcuCfg(_Cfg):
    executable: StrictStr
    clock_control: StrictStr
    set: StrictStr
    metrics: list[StrictStr]
    warmup_calls: StrictInt = Field(ge=0)
    input_scale: float
    extra_args: list[StrictStr]
    required: StrictBool


class TopCfg(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    stage: StrictStr
    out: StrictStr | None
    output_root: StrictStr
    tag: StrictStr | StrictInt
    allow_cpu_full: StrictBool = False


SECTIONS = {"gate": GateCfg, "timing": TimingCfg, "ncu": NcuCfg}


def check_job_config(cfg: dict) -> None:
    """The sections every stage reads (gate, timing, ncu) and the top-level keys, with their types: raises
    ValueError naming the key (``gate.seeds: Input should be a valid list (got 'abc')``)."""
    top = {k: v for k, v in cfg.items() if not isinstance(v, dict)}
    problems = []
    for name, model, data in [("", TopCfg, top)] + [(n, m, cfg[n]) for n, m in SECTIONS.items() if n in cfg]:
        try:
            model.model_validate(data)
        except ValidationError as e:
            for x in e.errors()[:3]:
                loc = ".".join(([name] if name else []) + [str(p) for p in x["loc"]])
                problems.append(f"{loc}: missing" if x["type"] == "missing" else
                                f"{loc}: {x['msg']} (got {x['input']!r})")
    if problems:
        raise ValueError("; ".join(problems))


# ---------------------------------------------------------------- result records


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Header(_Open):
    """What every result record has (``workflow/run.py: header`` + the job's closing fields)."""
    schema_: StrictStr = Field(alias="schema")
    stage: StrictStr
    case: StrictStr
    variant: StrictStr
    impl: StrictStr
    gpu: StrictStr
    tag: StrictStr
    params: dict[str, Any]
    status: Literal[STATUSES]
    passed: StrictBool
    reason: StrictStr
    env: dict[str, Any]
    config: dict[str, Any]
    wall_s: float = Field(ge=0)

    @model_validator(mode="after")
    def _header(self):
        if self.schema_ != SCHEMA.get(self.stage):
            raise ValueError(f"schema {self.schema_!r} is not the {self.stage} stage's ({SCHEMA.get(self.stage)!r})")
        if self.status != "ok" and self.passed:
            raise ValueError(f"status {self.status!r} with passed=true")
        return self


class GateRow(_Open):
    scale: float
    seed: StrictInt
    passed: StrictBool
    max_abs: float
    max_rel: float
    frac_failing: float = Field(ge=0, le=1)
    max_over_tol: float
    reason: StrictStr = ""


class Margin(_Open):
    passed: StrictBool | None
    max_over_tol: float | None = None
    reason: StrictStr = ""


class Alternate(_Open):
    passed: StrictBool


class Correctness(Header):
    results: list[GateRow] | None = None
    guards: dict[str, StrictBool] | None = None
    worst: dict[str, Any] | None = None
    gate_passed: StrictBool | None = None
    margin: Margin | None = None
    alternates: list[Alternate] | None = None

    @model_validator(mode="after")
    def _consistent(self):
        if self.status != "ok":
            return self
        if not self.results or self.guards is None or self.worst is None:
            raise ValueError("status ok needs the gate's results (per scale x seed), guards and worst")
        gate_ok = all(r.passed for r in self.results)
        if self.gate_passed is not None and self.gate_passed != gate_ok:
            raise ValueError(f"gate_passed={self.gate_passed} disagrees with its scale x seed results")
        if self.passed and not gate_ok:
            raise ValueError("passed=true while a scale x seed check failed")
        if self.passed and self.margin is not None and self.margin.passed is False:
            raise ValueError("passed=true while the margin check failed")
        if self.passed and any(not a.passed for a in self.alternates or []):
            raise ValueError("passed=true while an autotuning candidate failed the gate")
        gate = self.config.get("gate") or {}
        if gate.get("scales") and gate.get("seeds"):
            want = {(float(s), int(d)) for s in gate["scales"] for d in gate["seeds"]}
            if {(r.scale, r.seed) for r in self.results} != want:
                raise ValueError("the results do not cover the configured gate.scales x gate.seeds")
        return self


class Timing(Header):
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    n: StrictInt | None = None
    times_ms: list[float] | None = None
    post_check: dict[str, Any] | None = None
    passed_post_check: StrictBool | None = None

    @model_validator(mode="after")
    def _consistent(self):
        if self.status != "ok":
            return self
        q = (self.p20_ms, self.median_ms, self.p80_ms)
        if any(v is None or not math.isfinite(v) or v <= 0 for v in q):
            raise ValueError("status ok needs finite positive median_ms, p20_ms, p80_ms")
        if not q[0] <= q[1] <= q[2]:
            raise ValueError(f"p20 {q[0]} <= median {q[1]} <= p80 {q[2]} does not hold")
        if not self.n or self.times_ms is None or len(self.times_ms) != self.n:
            raise ValueError("n must be the number of times_ms (at least 1)")
        if self.post_check is None or self.passed_post_check is None:
            raise ValueError("status ok needs the post-timing check (post_check, passed_post_check)")
        if self.passed and not (self.passed_post_check and self.post_check.get("passed")):
            raise ValueError("passed=true while the timed output failed the post-timing check")
        return self


class Ncu(Header):
    kernels: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _consistent(self):
        if self.status == "ok" and self.kernels is None:
            raise ValueError("status ok needs the per-kernel summary (kernels)")
        return self


MODELS = {"correctness": Correctness, "timing": Timing, "ncu": Ncu}


def validate_record(stage: str, data) -> dict:
    """``data`` if it is a valid ``stage`` record; else ``InvalidResult`` saying why."""
    if not isinstance(data, dict):
        raise InvalidResult(f"not a result record: a JSON {type(data).__name__}, not an object")
    if "stage" in data and data["stage"] != stage:
        raise InvalidResult(f"a {data['stage']!r} record where a {stage!r} result belongs")
    try:
        MODELS[stage].model_validate(data)
    except ValidationError as e:
        raise InvalidResult(f"fails the {stage} schema: {_short(e)}") from None
    return data


def check_file(path, stage: str, *, gpu: str | None = None, case: str | None = None, variant: str | None = None,
               tag: str | None = None) -> dict:
    """The record at ``path``, read and validated, and its header matching where it lies (``gpu``, ``case``,
    ``variant``; ``tag``: the run's tag, "" for the default results). ``FileNotFoundError`` when absent,
    ``InvalidResult`` otherwise."""
    path = Path(path)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
        raise InvalidResult(f"unreadable result file: {e}") from None
    validate_record(stage, data)
    for key, want in (("gpu", gpu), ("case", case), ("variant", variant)):
        if want is not None and data.get(key) != want:
            raise InvalidResult(f"{key} {data.get(key)!r} in the record, {want!r} in its path: not this file's result")
    if tag is not None and data.get("tag", "") != tag:
        got = data.get("tag") or "(none: a default result)"
        raise InvalidResult(f"written by a run with tag {got}, not this run's ({tag or 'the default results'}): "
                            "an override run's result never stands for another run's")
    return data
