"""The package and the workflow import in one direction: no import cycle among the modules of ``kernels/`` and
``workflow/``, neither imports the lab (``bench/``), and ``workflow/`` reaches a kernel family only through the
registry (``kernels.get_variant``). Read from the source (the ASTs), so an import inside a function counts too."""
import ast
from pathlib import Path

from conftest import REPO
from kernels.cases import FAMILIES

ROOTS = ("kernels", "workflow")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ROOTS (a package is its ``__init__``)."""
    mods = {}
    for root in ROOTS:
        for f in sorted(Path(REPO, root).rglob("*.py")):
            parts = list(f.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of the modules ``path`` (module ``name``) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if not name.startswith(base + "."):  # a module's own ancestor packages are initialised before it runs
                out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # ``from pkg import module``
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: {i for i in _imports(m, f) if i in mods and i != m} for m, f in mods.items()}


def test_the_parser_sees_the_registry_imports():
    g = _graph()
    assert "kernels.registry" in g["kernels.families"]
    assert "kernels.timing" in g["workflow.stages.timing"]


def test_kernels_and_workflow_have_no_import_cycle():
    g = _graph()
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(g[m]):
            if state.get(n) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_kernels_and_workflow_never_import_bench():
    bad = [(m, i) for m, f in _modules().items() for i in _imports(m, f) if i == "bench" or i.startswith("bench.")]
    assert not bad, bad


def test_workflow_reaches_a_family_only_through_the_registry():
    bad = [(m, i) for m, f in _modules().items() if m.startswith("workflow")
           for i in _imports(m, f) if any(i == f"kernels.{fam}" or i.startswith(f"kernels.{fam}.") for fam in FAMILIES)]
    assert not bad, bad
