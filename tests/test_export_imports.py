"""pmapkit/export/ has no import circles: ``_exported`` (the data) is at the
bottom, the caller and the serializer are built on it. Every import counts,
module-level or inside a function."""
import ast
import os

import pmapkit.export

EXPORT_DIR = os.path.dirname(pmapkit.export.__file__)
PACKAGE = "pmapkit.export"


def _imports():
    """module -> the pmapkit.export modules it imports (by the ast)."""
    modules = {f[:-3] for f in os.listdir(EXPORT_DIR) if f.endswith(".py")}
    graph = {}
    for name in modules:
        with open(os.path.join(EXPORT_DIR, f"{name}.py")) as f:
            tree = ast.parse(f.read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == PACKAGE:
                    found |= {a.name for a in node.names if a.name in modules}
                elif node.module.startswith(PACKAGE + "."):
                    found.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[2] for a in node.names
                          if a.name.startswith(PACKAGE + ".")}
        graph[name] = found - {name}
    return graph


def _cycle(graph):
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


def test_no_import_circles_in_export():
    graph = _imports()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_exported_is_the_bottom():
    graph = _imports()
    assert graph["_exported"] == set()
    assert "_exported" in graph["_call"] and "_exported" in graph["_serialize"]
    assert "_call" not in graph["_serialize"] and "_serialize" not in graph["_call"]


def test_the_checker_sees_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
