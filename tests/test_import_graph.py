"""The package's import graph: no circles, the rooms in order.

Every ``import`` counts, module-level or inside a function, read from the
source (``ast``) of every module of the installed package.
"""
import ast
import os
import subprocess
import sys

import pmapkit

PACKAGE_DIR = os.path.dirname(pmapkit.__file__)
ROOT = "pmapkit"


def _module_name(path):
    rel = os.path.relpath(path, os.path.dirname(PACKAGE_DIR))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _modules():
    found = {}
    for folder, _, files in os.walk(PACKAGE_DIR):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                found[_module_name(path)] = path
    return found


def import_graph():
    """module -> the pmapkit modules it imports. ``from a import b`` names
    module ``a.b`` when that is a module, else ``a`` itself."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                if base.split(".")[0] != ROOT:
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    edges.add(sub if sub in modules else base)
        graph[name] = {e for e in edges if e in modules} - {name}
    return graph


def find_cycle(graph):
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def reachable(graph, start):
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_circles_in_the_package():
    graph = import_graph()
    assert len(graph) > 40
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_checker_sees_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_dispatch_core_imports_nothing_of_jax():
    # The compiled core is handed what it needs (leaf types, flatten, the
    # trace context, describe); it imports no pmapkit module, so none that
    # reaches jax._src.
    graph = import_graph()
    for core in ("pmapkit._dispatch", "pmapkit._shard_arg"):
        assert graph[core] == set(), graph[core]
        with open(_modules()[core]) as f:
            tree = ast.parse(f.read())
        imported = {a.name.split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"jax", "jaxlib", "numpy"}, imported


def test_only_the_private_module_imports_jax_src():
    for name, path in _modules().items():
        with open(path) as f:
            source = f.read()
        if name != "pmapkit._jax_private":
            assert "jax._src" not in "".join(
                line.split("#")[0] for line in source.splitlines()
                if line.lstrip().startswith(("import", "from"))), name


def test_the_rooms_are_in_order():
    graph = import_graph()
    assert "pmapkit.lowering" not in graph["pmapkit.primitives"]
    below_lowering = reachable(graph, "pmapkit.lowering")
    assert not {m for m in below_lowering if "process_local" in m or "distributed" in m}
    # Nothing outside pmapkit.bench imports it.
    for name, edges in graph.items():
        if not name.startswith("pmapkit.bench"):
            bench = {e for e in edges if e.startswith("pmapkit.bench")}
            allowed = {"pmapkit.cli"}  # the `pmapkit bench` command
            assert not bench or name in allowed, (name, bench)
    # The classic surface (pmapkit.legacy) sits above the core and the
    # systems: only the command that installs it reaches into it.
    assert "pmapkit.legacy.names" in graph
    for name, edges in graph.items():
        if not name.startswith(("pmapkit.legacy", "pmapkit.bench")):
            legacy = {e for e in edges if e.startswith("pmapkit.legacy")}
            assert not legacy or name == "pmapkit.cli", (name, legacy)


def test_exported_is_the_bottom_of_export():
    # Exported is the data class the caller and the serializer build on.
    graph = import_graph()
    export = {m for m in graph if m.startswith("pmapkit.export.")}
    assert not graph["pmapkit.export._exported"] & export
    assert "pmapkit.export._exported" in graph["pmapkit.export._call"]
    assert "pmapkit.export._exported" in graph["pmapkit.export._serialize"]
    assert "pmapkit.export._call" not in graph["pmapkit.export._serialize"]
    assert "pmapkit.export._serialize" not in graph["pmapkit.export._call"]


def test_import_pmapkit_loads_no_benchmark_module(tmp_path):
    code = ("import sys, pmapkit; "
            "print(sorted(m for m in sys.modules if m.startswith('pmapkit.bench')))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
