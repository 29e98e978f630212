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


def test_readme_family_results_are_the_family_reports():
    readme = Path(REPO, "README.md").read_text()
    for family, n in (("seqres", 7), ("hybrid", 3)):
        report = (RESULTS / family / "report.md").read_text()
        headline = report.split("## Headline", 1)[1].split("\n\n", 2)[1]
        assert headline.startswith("| comparison") and headline in readme, family
        per_case = report.split("## Per case x variant", 1)[1].split("\n\n", 2)[1]
        auto_rows = [l for l in per_case.splitlines() if "| auto |" in l]
        assert len(auto_rows) == n and all(row in readme for row in auto_rows), family


def test_family_reports_are_what_the_committed_jsons_say(tmp_path):
    """Rebuilding the family reports from docs/results/h200/raw gives the committed tables."""
    import os, subprocess, sys
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["bash", "workflow/scripts/family_report.sh", "docs/results/h200/raw", str(tmp_path)],
                   cwd=REPO, env=env, check=True, capture_output=True)
    for family in ("seqres", "hybrid"):
        def body(p):
            text = p.read_text()
            return text.split("## Headline", 1)[1].split("## Figures", 1)[0]
        assert body(tmp_path / family / "report.md") == body(RESULTS / family / "report.md"), family
