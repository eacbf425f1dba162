"""The package's modules import each other without a cycle, read from the source (not from what one run
happens to import): an import inside a function counts too, since a lazy import only hides a cycle in the
design, and so does an `if TYPE_CHECKING:` import: it never runs, but a type hint that names a module is a
dependency on it all the same."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "parity"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """The parity modules an import statement names: `from parity.x import y` is parity.x.y when that is a
    module, else parity.x (a name defined in it)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    targets = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            targets.add(f"{base}.{alias.name}")
        elif base in modules:
            targets.add(base)
    return targets


def import_graph() -> dict[str, set[str]]:
    """Each parity module and the parity modules it imports (anywhere in it)."""
    modules = _modules()
    names = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for node in _import_nodes(tree):
            edges |= _imported(name, path.name == "__init__.py", node, names)
        graph[name] = edges - {name}
    return graph


def knots(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of two or more modules that all reach each other through imports (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle in each knot, e.g. [a, b, c, a]."""
    return [_one_cycle(graph, group) for group in knots(graph)]


def _one_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest way round from the group's first module back to itself (breadth first)."""
    start = min(group)
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for target in sorted(graph[node] & group):
            if target == start:
                return paths[node] + [start]
            if target not in paths:
                paths[target] = paths[node] + [target]
                todo.append(target)
    raise AssertionError(f"no cycle through {start}")  # a strongly connected group always has one


def test_the_package_imports_have_no_cycle():
    graph = import_graph()
    found = knots(graph)
    assert not found, "import cycles:\n" + "\n".join(
        f"{' -> '.join(_one_cycle(graph, knot))}  (all of {', '.join(sorted(knot))} import each other)"
        for knot in found)


def test_the_cycle_finder_names_a_cycle_and_passes_a_tree():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_counts_imports_inside_functions_and_resolves_submodules():
    graph = import_graph()
    assert "parity.commands" in graph["parity"]  # `check` imports it when called
    assert "parity.replay.spill" in graph["parity.replay.pipeline"]  # `from parity.replay import spill`


def _room(module: str) -> str:
    """`parity.replay.read_step` -> `replay`; the package's own modules are rooms of their own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "parity"


def test_the_encoding_the_storage_and_the_console_import_nothing_of_parity_above_them():
    graph = import_graph()
    allowed = {"encoding": {"encoding", "errors"}, "storage": {"storage", "errors", "compat"}, "console": {"console", "errors"}}
    wrong = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                   if _room(module) in allowed and _room(target) not in allowed[_room(module)])
    assert not wrong, "\n".join(wrong)


def test_only_the_package_api_and_the_cli_import_the_commands_and_only_main_imports_the_cli():
    graph = import_graph()
    importers = {target: sorted(m for m, targets in graph.items() if target in targets)
                 for target in ("parity.commands", "parity.cli")}
    assert importers == {"parity.commands": ["parity", "parity.cli"], "parity.cli": ["parity.__main__"]}


# The rooms from the bottom up (docs/design.md, "The rooms"): each imports only rooms before it, never one after.
ROOMS = ("errors", "missing", "version", "choices", "compat", "encoding", "storage", "console", "capture", "stages", "config", "sets",
         "replay", "compare", "report", "api_arguments", "commands", "init_config", "cli", "taps", "beam", "parity", "testing",
         "__main__")


def test_each_room_imports_only_the_rooms_below_it():
    graph = import_graph()
    rank = {room: index for index, room in enumerate(ROOMS)}
    assert {_room(module) for module in graph} <= set(ROOMS), "a new room: place it in ROOMS and docs/design.md"
    upward = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                    if rank[_room(target)] > rank[_room(module)])
    assert not upward, "\n".join(upward)
