"""The repository's import graph: no circles, the rooms in order.

Every ``import`` counts, module-level or inside a function, read from the
source (``ast``) of every module of the installed package, and of the
checkout's ``bench/``, ``suites/`` (real libraries' test suites), the
stress pass (the top-level package ``stress``, run as ``python -m stress``
from the checkout) and ``tests/`` (helpers such as ``_install`` are imported
by their bare names).
"""
import ast
import os
import subprocess
import sys

import pytest

import _install
import pmapkit

PACKAGE_DIR = os.path.dirname(pmapkit.__file__)
ROOT = "pmapkit"
#: Source roots of the checkout beside the package: each is a directory put
#: on sys.path, so its modules are named relative to it ("." holds only the
#: top-level scripts, setup.py, and the packages below; the others are read
#: whole).
CHECKOUT_ROOTS = ("bench", "tests", "docs", ".ci", "suites", ".")
TOP_LEVEL_PACKAGES = ("stress",)


def _module_name(path, base):
    rel = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _python_files(top, recursive=True):
    for folder, dirs, files in os.walk(top):
        if not recursive:
            dirs[:] = []
        dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(folder, f)


def _modules():
    base = os.path.dirname(PACKAGE_DIR)
    return {_module_name(path, base): path for path in _python_files(PACKAGE_DIR)}


def _root_modules(root_dir, recursive=True):
    """The modules importable with ``root_dir`` on sys.path, by dotted name."""
    return {_module_name(path, root_dir): path
            for path in _python_files(root_dir, recursive)}


def _imports(name, path, known):
    """The modules of ``known`` that module ``name`` (at ``path``) imports.
    ``from a import b`` names module ``a.b`` when that is a module, else ``a``
    itself."""
    with open(path) as f:
        tree = ast.parse(f.read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    edges = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                edges.add(sub if sub in known else base)
    return {e for e in edges if e in known} - {name}


def import_graph():
    """module -> the pmapkit modules it imports."""
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def repository_graph():
    """The whole repository's graph: the package's modules by their names,
    the checkout roots' as ``root:module`` (``.:stress.runner``,
    ``tests:_install``); a root's modules see their own root and pmapkit.
    A root the checkout lacks (an sdist has no .ci/) is left out."""
    package = _modules()
    graph = import_graph()
    for root in CHECKOUT_ROOTS:
        folder = os.path.join(_install.REPO, root)
        if not os.path.isdir(folder):
            continue
        modules = _root_modules(folder, recursive=root != ".")
        if root == ".":
            for top in TOP_LEVEL_PACKAGES:
                modules.update({_module_name(path, folder): path for path in
                                _python_files(os.path.join(folder, top))})
        known = {**package, **modules}
        for name, path in modules.items():
            graph[f"{root}:{name}"] = {e if e in package else f"{root}:{e}"
                                      for e in _imports(name, path, known)}
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


@pytest.fixture
def checkout_graph():
    """The import graph of the whole checkout (skipped where there is none)."""
    if not os.path.isdir(os.path.join(_install.REPO, "stress")):
        pytest.skip("no checkout beside the tests; set PMAPKIT_CHECKOUT")
    return repository_graph()


def test_no_import_circles_in_the_repository(checkout_graph):
    graph = checkout_graph
    # The checker sees the stress pass, the bench scripts and the tests' helpers.
    for seen in (".:stress.runner", ".:stress.probes", ".:stress.__main__",
                 "bench:dispatch_cost", "suites:run", "tests:_install", "tests:_doc_blocks",
                 "tests:test_import_graph", ".:setup"):
        assert seen in graph, seen
    assert ".:stress.probes" in graph[".:stress.common"]
    assert "tests:_install" in graph["tests:conftest"]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_stress_pass_is_layered(checkout_graph):
    graph = checkout_graph
    stress = {m for m in graph if m.startswith(".:stress.")}
    # probes is the bottom; probe modules never reach the runner or the catalog.
    assert not graph[".:stress.probes"] & stress
    above = {".:stress.runner", ".:stress.catalog", ".:stress.report", ".:stress.__main__"}
    for module in stress - above:
        assert not reachable(graph, module) & above, module
    assert ".:stress.bad_pmap" in graph[".:stress.catalog"]


def test_the_checker_sees_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_dispatch_core_imports_nothing_of_jax():
    # The compiled core is handed what it needs (leaf types, flatten, the
    # trace context, describe); it imports no pmapkit module but its own
    # compiled rooms, so none that reaches jax._src.
    graph = import_graph()
    from pmapkit.core.hitpath import _source_hash
    rooms = {f"pmapkit.core.hitpath.{name}" for name in _source_hash.MODULES}
    for core in sorted(rooms):
        assert graph[core] <= rooms, graph[core]
        with open(_modules()[core]) as f:
            tree = ast.parse(f.read())
        imported = {a.name.split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"jax", "jaxlib", "numpy"}, imported


def _in_private_room(name):
    return name == "pmapkit._jax_private" or name.startswith("pmapkit._jax_private.")


def test_only_the_private_room_imports_jax_src():
    # The room is a package (its modules by subject); nothing outside it
    # names jax._src, and inside it only its own modules and JAX are imported.
    graph = import_graph()
    for name, path in _modules().items():
        with open(path) as f:
            source = f.read()
        if _in_private_room(name):
            assert all(_in_private_room(e) for e in graph[name]), (name, graph[name])
        else:
            assert "jax._src" not in "".join(
                line.split("#")[0] for line in source.splitlines()
                if line.lstrip().startswith(("import", "from"))), name
    assert "pmapkit._jax_private.probes" in graph


def test_the_rooms_are_in_order():
    graph = import_graph()
    assert "pmapkit.core.lowering.lowering" not in graph["pmapkit.core.rules.primitives"]
    below_lowering = reachable(graph, "pmapkit.core.lowering.lowering")
    assert not {m for m in below_lowering if "process_local" in m or "distributed" in m}
    # Nothing outside pmapkit.tools.bench imports it.
    for name, edges in graph.items():
        if not name.startswith("pmapkit.tools.bench"):
            bench = {e for e in edges if e.startswith("pmapkit.tools.bench")}
            allowed = {"pmapkit.tools.cli"}  # the `pmapkit bench` command
            assert not bench or name in allowed, (name, bench)
    # The classic surface (pmapkit.legacy) sits above the core and the
    # systems: only the tools (the command that installs it, migrate's
    # rules taken from its census, the bench) reach into it.
    assert "pmapkit.legacy.names" in graph
    for name, edges in graph.items():
        if not name.startswith(("pmapkit.legacy", "pmapkit.tools")):
            legacy = {e for e in edges if e.startswith("pmapkit.legacy")}
            assert not legacy, (name, legacy)


SYSTEMS = ("pmapkit.pmap", "pmapkit.pjit", "pmapkit.host_callback", "pmapkit.export",
           "pmapkit.colocated_python")


def _in(name, packages):
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_layout_shows_the_systems_on_the_core():
    graph = import_graph()
    # The five systems are packages side by side; the core is a folder of
    # its own; the tools and the classic surface are above them all.
    for system in SYSTEMS + ("pmapkit.core", "pmapkit.tools", "pmapkit.legacy"):
        assert system in graph, system
    for name, edges in graph.items():
        # No arrow up from the core: it imports only itself and the JAX boundary.
        if _in(name, ("pmapkit.core",)):
            assert all(_in(e, ("pmapkit.core", "pmapkit._jax_private")) for e in edges), \
                (name, edges)
        # A system reaches neither the tools nor the classic surface.
        if _in(name, SYSTEMS + ("pmapkit.distributed",)):
            assert not {e for e in edges if _in(e, ("pmapkit.tools", "pmapkit.legacy"))}, \
                (name, edges)
    # Nothing but a tool imports a tool (the package's ``__main__`` runs the CLI).
    for name, edges in graph.items():
        if not _in(name, ("pmapkit.tools",)) and name != "pmapkit.__main__":
            assert not {e for e in edges if _in(e, ("pmapkit.tools",))}, (name, edges)


#: The core's rooms, bottom to top (ARCHITECTURE.md, "Rooms"): a module of a
#: room imports only its own room and those below it.
CORE_ROOMS = ("hitpath", "keys", "sharding", "rules", "lowering", "programs", "misses",
              "aot")


def _room(name):
    parts = name.split(".")
    return parts[2] if len(parts) >= 3 and parts[:2] == ["pmapkit", "core"] else None


def room_faults(graph, rooms=CORE_ROOMS):
    """What breaks the room rule in ``graph``: a core module in no room (the
    core's own ``__init__`` aside), an arrow up (a room importing a room
    above it), the hit path importing pmapkit outside itself. One line each."""
    faults = []
    core = sorted(m for m in graph if _in(m, ("pmapkit.core",)))
    for name in core:
        here = _room(name)
        if name != "pmapkit.core" and here not in rooms:
            faults.append(f"{name}: not in a room of the core")
            continue
        for edge in sorted(graph[name]):
            there = _room(edge)
            if here == "hitpath" and there != "hitpath":
                faults.append(f"the hit path imports outside itself: {name} imports {edge}")
            elif here is not None and there in rooms and rooms.index(there) > rooms.index(here):
                faults.append(f"arrow up: {name} ({here}) imports {edge} ({there})")
    return faults


def test_the_core_is_rooms_in_order():
    graph = import_graph()
    for room in CORE_ROOMS:
        assert f"pmapkit.core.{room}" in graph, room
    assert room_faults(graph) == []
    # The public modules of the core's names live outside it, and only
    # re-export (pmapkit.mesh, pmapkit.caches, ...).
    public = [m for m in pmapkit._PUBLIC_MODULES if _in(m, ("pmapkit.core",))]
    assert not public, public


def test_the_room_checker_sees_each_fault():
    # The checker the test above calls, on the real graph with one planted
    # fault each: an arrow up, a module outside every room, the hit path
    # reaching a room above it. An arrow down is no fault.
    real = import_graph()
    assert room_faults(real) == []
    up = {**real, "pmapkit.core.keys.caches":
          real["pmapkit.core.keys.caches"] | {"pmapkit.core.misses.calls"}}
    assert room_faults(up) == ["arrow up: pmapkit.core.keys.caches (keys) imports "
                               "pmapkit.core.misses.calls (misses)"]
    stray = {**real, "pmapkit.core.stray": set()}
    assert room_faults(stray) == ["pmapkit.core.stray: not in a room of the core"]
    hit = {**real, "pmapkit.core.hitpath._compiled":
           real["pmapkit.core.hitpath._compiled"] | {"pmapkit._jax_private"}}
    assert room_faults(hit) == ["the hit path imports outside itself: "
                                "pmapkit.core.hitpath._compiled imports pmapkit._jax_private"]
    down = {**real, "pmapkit.core.aot.stages":
            real["pmapkit.core.aot.stages"] | {"pmapkit.core.keys.caches"}}
    assert room_faults(down) == []


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
            "print(sorted(m for m in sys.modules if m.startswith('pmapkit.tools.bench')))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
