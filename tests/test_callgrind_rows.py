"""bench/callgrind_rows.py measures the build users run, says which, and
reports the layer: checked on its own functions (no valgrind run here)."""
import importlib.util
import os

import pytest

from _install import REPO  # bench/ lies in the checkout, also when the tests run from a copy


@pytest.fixture(scope="module")
def rows():
    spec = importlib.util.spec_from_file_location(
        "callgrind_rows", os.path.join(REPO, "bench", "callgrind_rows.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_uncompiled_build_is_refused_unless_allowed(rows):
    with pytest.raises(rows.PureBuildError, match="pure-Python build"):
        rows._check_build("/src/pmapkit compiled=False", allow_pure=False)
    rows._check_build("/src/pmapkit compiled=False", allow_pure=True)
    rows._check_build("/site/pmapkit compiled=True", allow_pure=False)


def test_the_children_import_the_installed_build_or_the_named_tree(rows, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", REPO)
    monkeypatch.setenv("PMAPKIT_PUREPYTHON", "1")
    env = rows._env(None)
    assert "PYTHONPATH" not in env and "PMAPKIT_PUREPYTHON" not in env
    assert rows._env("/tmp/other-build")["PYTHONPATH"] == "/tmp/other-build"


def test_the_layer_is_the_call_less_the_runtime_s_execute(rows):
    # Parts 2 and 3: 100 and 300 calls; thread 1 the caller, 2 a worker.
    parts = {2: {1: 1_000_000, 2: 50_000, ("execute", 1): 400_000},
             3: {1: 3_000_000, 2: 150_000, ("execute", 1): 1_200_000}}
    main, every, layer = rows._per_call(parts, 2, 100, 300)
    assert (main, every, layer) == (10_000, 10_500, 6_000)


def test_the_classic_rows_are_rows(rows):
    assert set(rows.CLASSIC_ROWS) <= set(rows.ROWS)
    for row in ("alternating_1dev", "numpy_beside_1dev", "pjit_1dev"):
        assert row in rows.ROWS
