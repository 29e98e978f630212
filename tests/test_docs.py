"""The docs let the next engineer reproduce every figure: every command they quote names a tool of this tree (or, for
a tool since removed, a commit that has it) and only options that tool defines, every file they quote is in the tree
(or in a commit its paragraph names), every commit they cite is in this repository's history, and every "Results" N
they cite is an entry of the measurement log."""
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

DOCS = [Path(REPO, "README.md"), Path(REPO, "CHANGELOG.md")] + sorted(Path(REPO, "docs").glob("*.md"))
OURS = ("kernels", "bench", "workflow")          # packages of this tree; `python -m pytest` and others are not ours
HASH = re.compile(r"`([0-9a-f]{7,40})`")
COMMAND = re.compile(r"python3? -m ([\w.]+)((?:(?!python3? -m ).)*)", re.S)
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
DEFINED = re.compile(r"[\"'](--[a-z][\w-]*)[\"']")
IMPORTED = re.compile(r"^\s*(?:from|import) ((?:bench|workflow|kernels)(?:\.\w+)+)", re.M)


def git(*args):
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def history_available() -> bool:
    r = git("rev-parse", "--is-shallow-repository")
    return r.returncode == 0 and r.stdout.strip() == "false"


def paragraphs(text: str):
    """Blank-line separated paragraphs (a command and the commit it names stay together)."""
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def commands(text: str):
    """(module, flags, paragraph) of every `python -m ...` in a code span of ``text``."""
    for para in paragraphs(text):
        for span in re.findall(r"`([^`]*python3? -m [^`]*)`", para, flags=re.S):
            for m in COMMAND.finditer(span):
                module = m.group(1)
                if module.split(".")[0] in OURS and not module.endswith("."):  # `bench.seqres.<tool>`: a pattern
                    yield module, set(FLAG.findall(m.group(2))), para


def source_path(root: Path, module: str) -> Path:
    """A module's file (``-m`` runs a package's ``__main__``; a module file wins over a folder without
    ``__init__.py``, as Python's import does: ``workflow/report.py`` beside ``workflow/report/``)."""
    base = Path(root, *module.split("."))
    return base / "__main__.py" if (base / "__init__.py").exists() else base.with_suffix(".py")


def flags_defined(source: str, read) -> set:
    """Option strings defined in ``source`` and in the modules of this tree it imports (one level: shared parsers)."""
    found = set(DEFINED.findall(source))
    for module in IMPORTED.findall(source):
        text = read(module)
        if text:
            found |= set(DEFINED.findall(text))
    return found


def check_commands(doc: Path) -> list:
    problems = []
    here = lambda m: source_path(REPO, m).read_text() if source_path(REPO, m).exists() else None
    for module, flags, para in commands(doc.read_text()):
        rel = source_path(REPO, module).relative_to(REPO).as_posix()
        source, read = here(module), here
        if source is None:
            # a tool since removed: the paragraph must name a commit that has it, and its options are that commit's
            at = [h for h in HASH.findall(para) if git("cat-file", "-e", f"{h}:{rel}").returncode == 0]
            if not at:
                problems.append(f"{doc.name}: `python -m {module}`: no {rel} in this tree, and the paragraph names "
                                f"no commit that has it")
                continue
            def show(m, commit=at[0]):
                r = git("show", f"{commit}:{source_path(REPO, m).relative_to(REPO).as_posix()}")
                return r.stdout if r.returncode == 0 else None
            source, read = show(module), show
        missing = sorted(flags - flags_defined(source, read))
        if missing:
            problems.append(f"{doc.name}: `python -m {module}` with {missing}, which {rel} does not define")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_quoted_command_names_a_tool_and_its_options(doc):
    if not history_available() and any(not source_path(REPO, m).exists() for m, _, _ in commands(doc.read_text())):
        pytest.skip("a removed tool is quoted and there is no full git history (a shallow clone)")
    assert check_commands(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_commit_is_in_the_history(doc):
    if not history_available():
        pytest.skip("no full git history (a shallow clone)")
    cited = sorted(set(HASH.findall(doc.read_text())))
    missing = [h for h in cited if git("cat-file", "-e", f"{h}^{{commit}}").returncode != 0]
    assert missing == [], f"{doc.name} cites commits this repository does not have"


PATH = re.compile(r"`((?:kernels|bench|workflow|config|tests|job-scripts|docs|\.ci)/[\w./<>*{},-]*)`")


def placeholder(path: str) -> bool:
    """A pattern, not a file: `config/tuned/h200/caseNN.yaml`, `outputs/<gpu>/...`, a site's own `mysite_h200.yaml`."""
    return bool(re.search(r"[<>*{}]|[A-Z]{2}|mysite", path))


def missing_paths(doc: Path) -> list:
    """Paths of this tree quoted in ``doc`` that are neither in the tree (a file, a folder, or `file.symbol` of a
    Python file) nor in a commit its paragraph names (a file since removed)."""
    out = []
    for para in paragraphs(doc.read_text()):
        for quoted in sorted(set(PATH.findall(para))):
            path = quoted.split(":")[0].rstrip("/")
            if placeholder(path) or Path(REPO, path).exists() or Path(REPO, path.rsplit(".", 1)[0] + ".py").exists():
                continue
            if not any(git("cat-file", "-e", f"{h}:{path}").returncode == 0 for h in HASH.findall(para)):
                out.append(path)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_quoted_path_is_in_the_tree_or_its_commit(doc):
    if not history_available():
        pytest.skip("no full git history (a shallow clone)")
    assert missing_paths(doc) == [], f"{doc.name} quotes files that are not in this tree (nor in a commit it names)"


def cited_results(text: str) -> set:
    """Entry numbers of every `"Results" N`, `"Results" N–M`, `"Results" N, M and K` in ``text``."""
    refs = set()
    for m in re.finditer(r"\"Results\" (\d+(?:[–-]\d+)?(?:(?:, | and | or )\d+(?:[–-]\d+)?)*)", text):
        for part in re.split(r", | and | or ", m.group(1)):
            ends = part.replace("–", "-").split("-")
            refs.update(range(int(ends[0]), int(ends[-1]) + 1))
    return refs


def test_every_cited_results_entry_is_in_the_log():
    log = Path(REPO, "docs", "dag-results.md").read_text()
    entries = {int(n) for n in re.findall(r"^(?:\*\*|### Results )(\d+)[.:] ", log, flags=re.M)}
    assert entries == set(range(1, max(entries) + 1)), "the log's entries are numbered 1..N without gaps"
    for doc in DOCS:
        assert cited_results(doc.read_text()) <= entries, doc.name


def test_the_checks_catch_what_they_are_for(tmp_path):
    """Each check fails on the fault it names, so a passing run means something: a tool that moved, an option the
    tool lacks, a removed tool quoted without a commit that has it (and that commit's options), a cited range."""
    doc = tmp_path / "doc.md"
    doc.write_text("Moved: `python -m bench.timing_probe 11 --param x=1`.\n\n"
                   "An option it lacks: `python -m bench.seqres.timing_probe 11 --no-such-option`.\n\n"
                   "Fine: `python -m bench.seqres.timing_probe 11 --param x=1 --no-gc`, `python -m pytest -q -x`.\n")
    problems = check_commands(doc)
    assert len(problems) == 2
    assert "no bench/timing_probe.py in this tree" in problems[0]
    assert "['--no-such-option']" in problems[1]
    if history_available():  # bench/dag/attn_split.py existed at 3b398cd only (docs/dag-results.md "Results" 38)
        doc.write_text("Removed, no commit: `python -m bench.dag.attn_split --out DIR`.\n\n"
                       "Removed, at `3b398cd`: `python -m bench.dag.attn_split --out DIR --splits 4`.\n\n"
                       "At `3b398cd` with an option it never had: `python -m bench.dag.attn_split --out D --fast`.\n")
        problems = check_commands(doc)
        assert len(problems) == 2, problems
        assert "names no commit that has it" in problems[0] and "['--fast']" in problems[1]
    assert cited_results('"Results" 3–5 and 7, "Results" 9, 11 or 12') == {3, 4, 5, 7, 9, 11, 12}
    doc.write_text("Gone: `tests/test_seqres_probes.py`. Here: `tests/test_bench.py`, "
                   "`kernels/common/task_sync.wait_counters`, `config/tuned/h200/caseNN.yaml`.\n")
    assert missing_paths(doc) == ["tests/test_seqres_probes.py"]
