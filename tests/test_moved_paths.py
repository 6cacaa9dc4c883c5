"""Every public module path of the last release still imports (issue 47):
the moved ones with a DeprecationWarning naming the new path and giving the
very module there; the public homes of the core's names (``pmapkit.mesh``,
``pmapkit.caches``, ``pmapkit.inflight``, ``pmapkit.sharding_specs``) as
themselves, without a warning. Each check runs in a fresh interpreter: a
module is imported (and warns) once per process."""
import json
import subprocess
import sys

import pytest

from pmapkit._moved import MOVED

_PROBE = r"""
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    exec(sys.argv[1])
print(json.dumps({
    "warnings": [(w.category.__name__, str(w.message), w.filename) for w in caught],
    "result": RESULT,
}))
"""


def _run(statement, result):
    code = _PROBE.replace("RESULT", result)
    out = subprocess.run([sys.executable, "-P", "-c", code, statement],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_path_imports_warns_and_is_the_new_module(old):
    new = MOVED[old]
    got = _run(f"import {old}",
               f"sys.modules[{old!r}] is sys.modules[{new!r}]")
    assert got["result"] is True
    deprecations = [w for w in got["warnings"] if w[0] == "DeprecationWarning"]
    assert len(deprecations) == 1, got["warnings"]
    assert old in deprecations[0][1] and new in deprecations[0][1]


def test_from_the_old_maps_path_gives_the_same_objects():
    got = _run("from pmapkit.maps import Mesh, mesh, thread_resources\n"
               "import pmapkit",
               "[Mesh is pmapkit.Mesh, mesh is pmapkit.mesh, "
               "pmapkit.maps is sys.modules['pmapkit.pjit.maps']]")
    assert got["result"] == [True, True, True]


def test_from_the_old_placement_path_gives_the_same_functions():
    got = _run("from pmapkit.placement import device_put_sharded, device_put_replicated\n"
               "import pmapkit",
               "[device_put_sharded is pmapkit.device_put_sharded, "
               "device_put_replicated is pmapkit.device_put_replicated]")
    assert got["result"] == [True, True]


def test_the_warning_points_at_the_importing_line():
    got = _run("import pmapkit.maps", "None")
    (category, _, filename), = [w for w in got["warnings"] if w[0] == "DeprecationWarning"]
    assert filename == "<string>"   # the statement's own frame, not importlib's


@pytest.mark.parametrize("path, names", [
    ("pmapkit.mesh", ["Mesh", "mesh"]),
    ("pmapkit.caches", ["clear_caches", "set_cache_size", "cache_sizes"]),
    ("pmapkit.inflight", ["set_cpu_collectives_in_flight", "cpu_collectives_in_flight"]),
    ("pmapkit.sharding_specs", ["ShardingSpec", "NoSharding", "Chunked", "Unstacked",
                                "ShardedAxis", "Replicated", "parse_op_sharding"]),
])
def test_the_public_homes_import_without_a_warning(path, names):
    got = _run(f"import {path}\nimport pmapkit",
               f"[getattr(sys.modules[{path!r}], n) is getattr(pmapkit, n, "
               f"getattr(sys.modules[{path!r}], n)) for n in {names!r}]")
    assert all(got["result"]), got
    assert not [w for w in got["warnings"] if w[0] == "DeprecationWarning"
                and "pmapkit" in w[1]], got["warnings"]


def test_importing_the_mesh_module_leaves_pmapkit_mesh_the_function():
    got = _run("import pmapkit, pmapkit.mesh",
               "[callable(pmapkit.mesh), type(pmapkit.mesh).__name__, "
               "pmapkit.mesh is sys.modules['pmapkit.mesh'].mesh]")
    assert got["result"] == [True, "function", True]


def test_the_mesh_names_their_public_home():
    # Pickles, reprs and the API reference name pmapkit.mesh, not the core room.
    got = _run("from pmapkit.pjit import maps", "[maps.Mesh.__module__, maps.mesh.__module__]")
    assert got["result"] == ["pmapkit.mesh", "pmapkit.mesh"]
