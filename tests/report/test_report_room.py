"""The report room renders: it reads no fingerprint set and starts no process (the diff is computed in
parity.compare, which hands it a `DiffSummary`). Read from the source, imports inside functions included."""
from __future__ import annotations

import ast

from tests.test_import_graph import PACKAGE, import_graph

COMPUTING = ("parity.sets", "parity.replay", "parity.compare.diff", "parity.compare.hashdiff",
             "parity.compare.pair_values", "parity.compare.halves", "parity.compare.engine")
PROCESSES = ("subprocess", "multiprocessing", "concurrent", "os.fork")


def _reached(graph: dict[str, set[str]], start: str) -> dict[str, str | None]:
    """Every module `start` imports, directly or through others, and the module that imports it first."""
    via: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        module = todo.pop()
        for target in sorted(graph[module]):
            if target not in via:
                via[target] = module
                todo.append(target)
    return via


def _chain(via: dict[str, str | None], module: str) -> str:
    chain = [module]
    while via[chain[-1]] is not None:
        chain.append(via[chain[-1]])
    return " <- ".join(chain)


def test_no_report_module_reaches_the_code_that_reads_fingerprint_sets():
    graph = import_graph()
    found = []
    for module in sorted(m for m in graph if m == "parity.report" or m.startswith("parity.report.")):
        via = _reached(graph, module)
        found += [_chain(via, m) for m in via if m.startswith(COMPUTING)]
    assert found == [], "\n".join(found)


def test_no_report_module_imports_a_way_to_start_a_process():
    found = []
    for path in sorted((PACKAGE / "report").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {name}" for name in names if name.startswith(PROCESSES)]
            if isinstance(node, ast.Attribute) and node.attr in ("fork", "spawnv", "system", "popen", "Popen"):
                found.append(f"{path.name}: .{node.attr}")
    assert found == []


def test_the_room_check_sees_a_report_module_that_imports_the_diff(monkeypatch):
    graph = import_graph()
    graph["parity.report.model"] = graph["parity.report.model"] | {"parity.compare.halves"}
    via = _reached(graph, "parity.report.model")
    assert [m for m in via if m.startswith(COMPUTING)]
