"""Publish a pipeline run's results: copy its result JSONs into the published tree, rebuild the reports, refresh
the README's results block.

    python -m workflow.publish outputs                    # a run's outputs/ (or the results.tgz that
    python -m workflow.publish results.tgz --dry-run      #   bench/device_pipeline.sh leaves in $OUT)

Every correctness, timing and ncu record of the H200 (the published GPU type: the reports are its) under the source
is read and checked first, and nothing is written unless all pass: each must be a valid record at its own path
(``workflow.schemas.check_file``), name a clean commit (``env.git_commit``, not ``+dirty``; on a lent machine pass
``MKH_GIT_COMMIT``), have run on an H200 (``device_names`` in ``config/gpu/h200.yaml``), not be an ``oom`` (run it
again alone), and a timing or ncu record needs its case x variant's correctness record in the same run. Failed gates
are published as they are: the report shows them. Then each record is copied byte for byte into
``<dest>/raw/<stage>/h200/<case>/<variant>.json`` (a temp file renamed over), ``workflow/scripts/family_report.sh``
rebuilds the family reports and the all-cases report, and the README's results block (the all-cases report's
headline and ``auto`` rows, ``tests/test_published_results.py``) is replaced by the new one. The family table's
prose is the maintainer's: the new geomeans are printed for it, and the test checks them.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernels.cases import config_dir
from kernels.tuning import device_patterns, matches_device

from .schemas import InvalidResult, check_file
from .stages.common import write_bytes_atomic

REPO = Path(__file__).resolve().parent.parent
STAGES = ("correctness", "timing", "ncu")
FAMILIES = ("seqres", "dag", "hybrid", "all")  # the reports family_report.sh writes; "all" is the README's block


class PublishError(SystemExit):
    """A run that cannot be published as it is; the message names the file and the fix."""

    def __init__(self, msg: str):
        super().__init__(f"error: {msg}")


@dataclass(frozen=True)
class Record:
    stage: str
    case: str
    variant: str
    path: Path
    data: dict

    @property
    def commit(self) -> str:
        return (self.data.get("env") or {}).get("git_commit") or ""

    def target(self, raw: Path, gpu: str) -> Path:
        return raw / self.stage / gpu / self.case / f"{self.variant}.json"


def gpu_patterns(gpu: str) -> list[str]:
    """The ``device_names`` of ``config/gpu/<gpu>.yaml`` (regex patterns of torch's device name)."""
    p = config_dir() / "gpu" / f"{gpu}.yaml"
    if not p.exists():
        known = ", ".join(sorted(q.stem for q in p.parent.glob("*.yaml")))
        raise PublishError(f"unknown GPU type {gpu!r} (config/gpu/{gpu}.yaml); known: {known}")
    return device_patterns(p)


def collect(src: Path, gpu: str, shown: Path | None = None) -> list[Record]:
    """Every result record of ``gpu`` under the outputs tree ``src``, each checked (see the module doc); messages
    name the files under ``shown`` (what the user passed: a tarball's name rather than where it was unpacked)."""
    shown = shown or src
    patterns = gpu_patterns(gpu)
    recs, problems = [], []
    for stage in STAGES:
        for path in sorted((src / stage / gpu).glob("*/*.json")):
            case, variant = path.parent.name, path.stem
            try:
                data = check_file(path, stage, gpu=gpu, case=case, variant=variant, tag="")
            except InvalidResult as e:
                problems.append(f"{shown / path.relative_to(src)}: {e}")
                continue
            recs.append(Record(stage, case, variant, path, data))
    if not recs and not problems:
        raise PublishError(f"no result records under {shown}/{{{','.join(STAGES)}}}/{gpu}/: is it a run's outputs/ "
                           f"of GPU type {gpu!r}?")
    have = {(r.case, r.variant) for r in recs if r.stage == "correctness"}
    for r in recs:
        where = f"{shown / r.path.relative_to(src)}"
        if not re.fullmatch(r"[0-9a-f]{40}", r.commit):
            problems.append(f"{where}: no clean commit recorded (env.git_commit {r.commit!r}): run from a committed "
                            "tree (`+dirty`: tracked files differed), and on a lent machine pass "
                            "MKH_GIT_COMMIT=<the full hash of the tree sent>")
        name = (r.data.get("env") or {}).get("gpu_name") or ""
        if patterns and not matches_device(patterns, name):
            problems.append(f"{where}: ran on {name!r}, not a {gpu} ({patterns} in config/gpu/{gpu}.yaml)")
        if r.data.get("status") == "oom":
            problems.append(f"{where}: out of GPU memory beside other jobs; run it again alone")
        if r.stage != "correctness" and (r.case, r.variant) not in have:
            problems.append(f"{where}: no correctness record of {r.case} x {r.variant} in this run; publish a "
                            "timing or ncu result with the gate that admits it")
    if problems:
        raise PublishError(f"{len(problems)} record(s) cannot be published:\n  " + "\n  ".join(problems))
    return recs


def report_block(results: Path, family: str) -> tuple[str, str, int, str]:
    """One committed report's README block: its headline table, its per-case table's header with the ``auto``
    rows, how many ``auto`` rows, and the geomean of ``auto`` against the fastest gated peer."""
    report = (results / family / "report.md").read_text()
    headline = report.split("## Headline", 1)[1].split("\n\n", 2)[1]  # the table under the heading
    per_case = report.split("## Per case x variant", 1)[1].split("\n\n", 2)[1].splitlines()
    auto_rows = [row for row in per_case[2:] if "| auto |" in row]
    geomean = next(row for row in headline.splitlines() if row.startswith("| auto vs fastest gated peer |"))
    return headline, "\n".join(per_case[:2] + auto_rows), len(auto_rows), geomean.split("|")[2].strip()


def readme_block(results: Path) -> str:
    """The README's results block: the all-cases report's headline, a blank line, its ``auto`` rows."""
    headline, auto_table, _, _ = report_block(results, "all")
    return headline + "\n\n" + auto_table


def source_tree(src: Path, stack: list) -> tuple[Path, Path]:
    """The outputs tree of ``src`` and how to name it: the directory itself, or a results tarball unpacked into a
    temp directory (``stack`` holds it until the caller is done), named as a path inside the tarball."""
    if src.is_dir():
        return src, src
    if not src.is_file() or not tarfile.is_tarfile(src):
        raise PublishError(f"{src}: neither a run's outputs/ directory nor a results tarball")
    tmp = tempfile.TemporaryDirectory(prefix="mkh-publish-")
    stack.append(tmp)
    with tarfile.open(src) as t:
        t.extractall(tmp.name, filter="data")
    root = Path(tmp.name)
    return (root / "outputs", src / "outputs") if (root / "outputs").is_dir() else (root, src)


def build_reports(dest: Path) -> None:
    """The family reports and the all-cases report of ``dest`` rebuilt from ``dest/raw`` (family_report.sh)."""
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["bash", str(REPO / "workflow" / "scripts" / "family_report.sh"), str(dest / "raw"), str(dest)],
                   cwd=REPO, env=env, check=True)


def publish(src: Path, gpu: str, dest: Path, readme: Path | None, dry_run: bool = False) -> list[Record]:
    stack: list = []
    try:
        tree, shown = source_tree(src, stack)
        recs = collect(tree, gpu, shown)
        commits = sorted({r.commit for r in recs})
        print(f"{len(recs)} records of {gpu}, commit(s) {', '.join(c[:7] for c in commits)}:")
        for r in recs:
            d = r.data
            what = ("pass" if d.get("passed") else "FAIL") if r.stage == "correctness" else d.get("status")
            ms = f" {d['median_ms']:.4g} ms" if r.stage == "timing" and d.get("median_ms") is not None else ""
            print(f"  {r.stage:<11} {r.case:<8} {r.variant:<28} {r.commit[:7]} {what}{ms}")
        if dry_run:
            print("dry run: nothing written")
            return recs
        old_block = readme_block(dest) if readme and (dest / "all" / "report.md").exists() else None
        old = {f: report_block(dest, f)[3] for f in FAMILIES if (dest / f / "report.md").exists()}
        before = {}  # each target's bytes before (None: it was not there), to put back if the reports fail
        for r in recs:
            t = r.target(dest / "raw", gpu)
            before[t] = t.read_bytes() if t.exists() else None
            write_bytes_atomic(t, r.path.read_bytes())
    finally:
        for t in stack:
            t.cleanup()
    try:
        build_reports(dest)
    except subprocess.CalledProcessError:
        for t, b in before.items():
            if b is None:
                t.unlink()
            else:
                write_bytes_atomic(t, b)
        build_reports(dest)
        raise PublishError("the reports could not be built with this run's records (family_report.sh's message "
                           "above); the published records are as they were, the reports rebuilt from them") from None
    for f in FAMILIES:
        if (dest / f / "report.md").exists():
            print(f"  {f}: geomean {old.get(f, '-')}× -> {report_block(dest, f)[3]}×")
    if readme is not None:
        text = readme.read_text()
        new_block = readme_block(dest)
        if old_block is None or old_block not in text:
            print(f"{readme}: its results block was not the committed report's; paste this block by hand:\n{new_block}")
        elif old_block != new_block:
            write_bytes_atomic(readme, text.replace(old_block, new_block).encode())
            print(f"{readme}: results block replaced")
        print(f"{readme}: update the family table's geomeans above where they changed, and add a CHANGELOG.md row")
    return recs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("src", type=Path, help="a run's outputs/ directory or its results tarball")
    ap.add_argument("--dest", type=Path, default=REPO / "docs" / "results" / "h200",
                    help="the published results (raw/ and the reports)")
    ap.add_argument("--readme", type=Path, default=REPO / "README.md", help="the README whose block is refreshed")
    ap.add_argument("--no-readme", action="store_true", help="leave the README alone")
    ap.add_argument("--dry-run", action="store_true", help="check and list the records, write nothing")
    a = ap.parse_args(argv)
    publish(a.src, "h200", a.dest, None if a.no_readme else a.readme, a.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
