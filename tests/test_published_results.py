"""Published numbers are regenerated from the committed result files, never typed by hand."""
from pathlib import Path

from conftest import REPO
from workflow.peers_table import collect, render

RESULTS = Path(REPO, "docs", "results", "h200")


def test_peers_table_is_what_the_committed_jsons_say():
    text = render(collect(RESULTS / "raw", "h200"), "h200")
    assert (RESULTS / "peers.md").read_text() == text


def test_peers_table_flags_a_failing_fp32_peer(tmp_path):
    import json, shutil
    src = RESULTS / "raw"
    shutil.copytree(src, tmp_path / "raw")
    p = tmp_path / "raw" / "correctness" / "h200" / "case05" / "eager_sdpa.json"
    d = json.loads(p.read_text())
    d["passed"] = False
    p.write_text(json.dumps(d))
    text = render(collect(tmp_path / "raw", "h200"), "h200")
    assert "case05 eager_sdpa: fp32 peer FAILS the gate" in text


FAMILIES = (("seqres", 7), ("dag", 4), ("hybrid", 3))  # the reports of each family's cases, and their case counts
ALL = ("all", 14)  # the report of every case: the README's results block
README = Path(REPO, "README.md")


def _report_block(family):
    """The README block of one family, cut from its committed report (``workflow.publish.report_block``)."""
    from workflow.publish import report_block
    return report_block(RESULTS, family)


def _tables(text):
    """Every markdown table of a text (outside code blocks) as a list of rows, each a list of cells."""
    tables, current, in_code = [], [], False
    for line in text.splitlines() + [""]:
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("|"):
            current.append([c.strip() for c in line.replace("\\|", "/").strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_readme_results_are_the_reports():
    """Every number of the README's results comes from a committed report: the results block is the all-cases
    report's headline table and its `auto` rows, verbatim and in one piece; the family table's headline numbers are
    each family report's geomean against the fastest gated peer. Refreshing the README after a re-run is a copy of
    the block this test prints."""
    readme = README.read_text()
    headline, auto_table, n_rows, _ = _report_block(ALL[0])
    assert headline.startswith("| comparison") and n_rows == ALL[1]
    block = headline + "\n\n" + auto_table
    assert block in readme, f"README's results differ from the report; the block is:\n{block}"
    for family, n in FAMILIES + (ALL,):
        _, _, n_rows, geomean = _report_block(family)
        assert n_rows == n, family
        key = "auto" if family == "all" else family
        row = next(l for l in readme.splitlines() if l.startswith(f"| `{key}` |"))
        assert f"{geomean}×" in row, f"the family table's {key} row does not give the report's geomean {geomean}×"


def test_readme_is_short_and_its_tables_render():
    """A user's guide: at most 150 lines, and every table's rows have the header's number of cells."""
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    tables = _tables(text)
    assert tables
    for rows in tables:
        assert set(rows[1]) <= {"---", ":---", "---:", ":---:"} and len(rows) > 2, rows[0]
        assert all(len(r) == len(rows[0]) for r in rows), rows[0]


def test_family_reports_are_what_the_committed_jsons_say(tmp_path):
    """Rebuilding the family reports from docs/results/h200/raw gives the committed tables."""
    import os, subprocess, sys
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["bash", "workflow/scripts/family_report.sh", "docs/results/h200/raw", str(tmp_path)],
                   cwd=REPO, env=env, check=True, capture_output=True)
    for family in [f for f, _ in FAMILIES] + [ALL[0]]:
        def body(p):
            text = p.read_text()
            return text.split("## Headline", 1)[1].split("## Figures", 1)[0]
        assert body(tmp_path / family / "report.md") == body(RESULTS / family / "report.md"), family


def _fake_run(tmp_path, case="case12", variants=("auto",), stages=("correctness", "timing"), edit=None):
    """A run's outputs/ made of published records (``edit(stage, variant, record)`` changes them)."""
    import json
    out = tmp_path / "outputs"
    for stage in stages:
        for v in variants:
            d = json.loads((RESULTS / "raw" / stage / "h200" / case / f"{v}.json").read_text())
            if edit:
                edit(stage, v, d)
            p = out / stage / "h200" / case / f"{v}.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(d))
    return out


def test_publish_copies_the_run_rebuilds_the_reports_and_the_readme_block(tmp_path):
    """workflow.publish on a run whose case 12 `auto` timing is 10% faster: the JSON lands in raw/, the reports
    are rebuilt from it, and the README's results block is the new all-cases report's."""
    import shutil
    from workflow.publish import publish, readme_block

    def faster(stage, v, d):
        if stage == "timing":
            d["median_ms"] *= 0.9
            d["times_ms"] = [t * 0.9 for t in d["times_ms"]]
            for k in ("p20_ms", "p80_ms", "min_ms"):
                d[k] *= 0.9
    out = _fake_run(tmp_path, edit=faster)
    dest = tmp_path / "h200"
    shutil.copytree(RESULTS, dest)
    readme = tmp_path / "README.md"
    readme.write_text(README.read_text())
    old = readme_block(dest)
    publish(out, "h200", dest, readme)
    src = out / "timing" / "h200" / "case12" / "auto.json"
    assert (dest / "raw" / "timing" / "h200" / "case12" / "auto.json").read_bytes() == src.read_bytes()
    new = readme_block(dest)
    assert new != old and new in readme.read_text() and old not in readme.read_text()
    assert readme.read_text().replace(new, old) == README.read_text()  # nothing else in the README changed
    assert not list(dest.rglob("*.tmp"))


def test_publish_refuses_a_run_it_cannot_vouch_for(tmp_path):
    """Nothing is written when a record has no commit, ran on another GPU type, ran out of memory, or is a timing
    without its gate; each refusal names the file and the fix."""
    import pytest
    from workflow.publish import PublishError, collect

    def no_commit(stage, v, d):
        d["env"]["git_commit"] = None

    def h100(stage, v, d):
        d["env"]["gpu_name"] = "NVIDIA H100 80GB HBM3"

    def oom(stage, v, d):
        d["status"] = "oom"
    for name, kw, says in (("commit", dict(edit=no_commit), "MKH_GIT_COMMIT"),
                           ("gpu", dict(edit=h100), "not a h200"),
                           ("oom", dict(edit=oom, stages=("correctness",)), "oom|out of GPU memory"),
                           ("gate", dict(stages=("timing",)), "no correctness record")):
        out = _fake_run(tmp_path / name, **kw)
        with pytest.raises(PublishError, match=says) as e:
            collect(out, "h200")
        assert "case12/auto.json" in str(e.value), name
    with pytest.raises(PublishError, match="no result records"):
        collect(tmp_path, "h200")
    with pytest.raises(PublishError, match="unknown GPU type"):
        collect(_fake_run(tmp_path / "x"), "h300")


def test_publish_reads_the_device_pipelines_tarball(tmp_path):
    """`bench/device_pipeline.sh` leaves outputs/ as results.tgz: publish reads it as it reads the directory."""
    import tarfile
    from workflow.publish import publish
    out = _fake_run(tmp_path / "run")
    with tarfile.open(tmp_path / "results.tgz", "w:gz") as t:
        t.add(out, arcname="outputs")
    from workflow.publish import main
    assert main([str(tmp_path / "results.tgz"), "--dry-run", "--dest", str(tmp_path / "untouched")]) == 0
    recs = publish(tmp_path / "results.tgz", "h200", tmp_path / "untouched", None, dry_run=True)
    assert {(r.stage, r.case, r.variant) for r in recs} == {("correctness", "case12", "auto"),
                                                           ("timing", "case12", "auto")}
    assert not (tmp_path / "untouched").exists()


def test_publish_puts_the_records_back_when_the_reports_fail(tmp_path, monkeypatch):
    """No half-published run: when the reports cannot be built with the new records, the old ones go back (a new
    file is removed) and the reports are rebuilt from them."""
    import json, shutil, subprocess
    import pytest
    import workflow.publish as pub

    def other_commit(stage, v, d):
        d["env"]["git_commit"] = "f" * 40
    out = _fake_run(tmp_path, edit=other_commit)
    new = out / "correctness" / "h200" / "case12" / "x.json"  # a record the published tree does not have
    d = json.loads((out / "correctness" / "h200" / "case12" / "auto.json").read_text())
    new.write_text(json.dumps({**d, "variant": "x"}))
    dest = tmp_path / "h200"
    shutil.copytree(RESULTS / "raw", dest / "raw")
    calls = []

    def build(d):
        calls.append(d)
        if len(calls) == 1:
            raise subprocess.CalledProcessError(1, "family_report.sh")
    monkeypatch.setattr(pub, "build_reports", build)
    with pytest.raises(pub.PublishError, match="as they were"):
        pub.publish(out, "h200", dest, None)
    assert calls == [dest, dest]
    for f in (dest / "raw").rglob("*.json"):
        rel = f.relative_to(dest / "raw")
        assert f.read_bytes() == (RESULTS / "raw" / rel).read_bytes(), rel
    assert not (dest / "raw" / "correctness" / "h200" / "case12" / "x.json").exists()
