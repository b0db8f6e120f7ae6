"""The package's import graph against the layer order written in docs/design.md.

Every ``localrag`` import (at module level or inside a function) must point to the importer's own
layer or one below it, and the module graph must have no cycles. A row may hold siblings separated
by ``|`` (the entry points: the UI, the API, the CLI, the benchmarks): a sibling never imports
another. The layers are read from the ``layers`` block of docs/design.md, so the document and the
code cannot drift apart. And no code outside ``localrag/modes/`` decides by a mode's id.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from localrag.rasd.loop import RasdDecoder

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "localrag"


def design_rows() -> list[list[list[str]]]:
    """The rows, bottom first: each a list of sibling groups, each a list of module prefixes."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/design.md has no ```layers block"
    rows = [[g.split() for g in ln.split(":", 1)[1].split("|")] for ln in block.group(1).strip().splitlines()]
    return list(reversed(rows))  # written top first, like a stack


def design_layers() -> list[list[str]]:
    """The layers, bottom first: each a list of module prefixes (``localrag.rag``)."""
    return [[p for group in row for p in group] for row in design_rows()]


def sibling_of(name: str) -> tuple[int, int] | None:
    """(row, group) of a module on a row of siblings; None elsewhere."""
    for r, row in enumerate(design_rows()):
        if len(row) > 1:
            for g, group in enumerate(row):
                if any(name == p or name.startswith(p + ".") for p in group):
                    return r, g
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(path: Path) -> set[str]:
    """Dotted names of the localrag modules a file imports (anywhere in it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("localrag")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("localrag"):
            base = node.module
            for a in node.names:  # `from localrag.bench import speed` imports a module, not a name
                sub = f"{base}.{a.name}"
                out.add(sub if module_file(sub) is not None else base)
    return out


def module_file(name: str) -> Path | None:
    p = ROOT.joinpath(*name.split("."))
    for f in (p.with_suffix(".py"), p / "__init__.py"):
        if f.is_file():
            return f
    return None


def layer_of(name: str, layers: list[list[str]]) -> int:
    best, depth = None, -1
    for i, prefixes in enumerate(layers):
        for pre in prefixes:
            if (name == pre or name.startswith(pre + ".")) and pre.count(".") > depth:
                best, depth = i, pre.count(".")
    assert best is not None, f"{name} is in no layer of docs/design.md"
    return best


def graph() -> dict[str, set[str]]:
    return {module_name(f): project_imports(f) for f in PACKAGE.rglob("*.py")}


def test_every_import_points_down_the_layers():
    layers = design_layers()
    upward = []
    for mod, imports in graph().items():
        if mod == "localrag":  # the package's own __init__ (a docstring and the version)
            continue
        own = layer_of(mod, layers)
        for imp in imports:
            if layer_of(imp, layers) > own:
                upward.append(f"{mod} (layer {own}) imports {imp} (layer {layer_of(imp, layers)})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_siblings_never_import_each_other():
    """The UI and the API (and the CLI and the benchmarks) share the app layer, not each other."""
    crossing = []
    for mod, imports in graph().items():
        mine = sibling_of(mod)
        if mine is None:
            continue
        for imp in imports:
            theirs = sibling_of(imp)
            if theirs is not None and theirs[0] == mine[0] and theirs[1] != mine[1]:
                crossing.append(f"{mod} imports {imp}")
    assert not crossing, "sibling imports:\n" + "\n".join(crossing)


def test_no_mode_is_chosen_by_its_id_outside_the_modes():
    """`mode.id == ...`, `.id == "grounded"`, `mode == "rasd"`: a mode's own file decides what it needs."""
    pattern = re.compile(r"""(\.id\s*[!=]=\s*["'])|(\bmode\w*\s*[!=]=\s*["'])|(["']\s*[!=]=\s*\w*\.id\b)""")
    found = []
    for f in PACKAGE.rglob("*.py"):
        if f.is_relative_to(PACKAGE / "modes"):
            continue
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "mode switches outside localrag/modes:\n" + "\n".join(found)


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if n not in g or n == m:
                continue
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_gradio_stays_in_the_ui_and_no_spec_module_remains():
    for f in PACKAGE.rglob("*.py"):
        mod = module_name(f)
        tree = ast.parse(f.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        if any(n == "gradio" or n.startswith("gradio.") for n in names):
            assert mod.startswith("localrag.ui") or mod == "localrag.launch", f"{mod} imports gradio"
        assert "spec" not in mod.split("."), f"module {mod}: 'spec' names several ideas; use rasd or grounded"
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert not node.name.startswith("Spec"), f"{mod}.{node.name}"


def test_the_rasd_decode_loop_fits_in_forty_lines():
    """propose, plan, verify, accept, commit: the whole step reads as one short function."""
    lines = inspect.getsource(RasdDecoder.steps).splitlines()
    assert len(lines) <= 40, len(lines)
