"""A compiled core built from other sources than those beside it is refused.

Each extension carries the SHA-256 of the sources setup.py built it from
(``BUILT_FROM``); ``pmapkit.core.hitpath._compiled`` compares it with the ``.py`` and
``.pxd`` it would otherwise run as the pure build. Checked on a copy of the
installed package in a fresh process: untouched it loads compiled; with
``_dispatch.py`` edited it raises ``StaleBuildError`` naming the rebuild
command; ``PMAPKIT_PUREPYTHON=1`` still runs the edited sources.
"""
import glob
import os
import shutil
import subprocess
import sys

import pytest

import pmapkit
from pmapkit.core.hitpath import _compiled, _source_hash

PACKAGE = os.path.dirname(os.path.abspath(pmapkit.__file__))
CORE = os.path.join(PACKAGE, "core", "hitpath")

_PROBE = ("import pmapkit.core.hitpath._compiled as c; "
          "print(c.COMPILED, c.dispatch.__file__)")


def _import_in(root, **env):
    environ = {k: v for k, v in os.environ.items() if k != "PMAPKIT_PUREPYTHON"}
    environ.update(PYTHONPATH=root, **env)
    return subprocess.run([sys.executable, "-c", _PROBE], cwd=root, env=environ,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def compiled_copy(tmp_path):
    if not _compiled.COMPILED:
        pytest.skip("this pmapkit runs its pure build (no compiled modules "
                    "installed): nothing to go stale")
    root = tmp_path
    shutil.copytree(PACKAGE, root / "pmapkit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.c", "build"))
    return str(root)


def test_the_installed_extensions_carry_their_sources_hash():
    if not _compiled.COMPILED:
        pytest.skip("this pmapkit runs its pure build")
    for name, module in (("_dispatch", _compiled.dispatch),
                         ("_shard_arg", _compiled.shard_arg)):
        assert module.BUILT_FROM == _source_hash.source_hash(CORE, name)
        assert len(module.BUILT_FROM) == 64


def test_a_stale_compiled_module_is_refused(compiled_copy):
    core = os.path.join(compiled_copy, "pmapkit", "core", "hitpath")
    assert glob.glob(os.path.join(core, "_dispatch.*.so"))
    fresh = _import_in(compiled_copy)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.startswith("True " + core), fresh.stdout
    with open(os.path.join(core, "_dispatch.py"), "a") as f:
        f.write("\n# an edit the compiled module does not have\n")
    stale = _import_in(compiled_copy)
    assert stale.returncode != 0
    assert "StaleBuildError" in stale.stderr, stale.stderr
    assert "_dispatch" in stale.stderr and "edited since the last build" in stale.stderr
    assert _source_hash.REBUILD_COMMAND in stale.stderr
    # The pure build runs the edited sources as they are.
    pure = _import_in(compiled_copy, PMAPKIT_PUREPYTHON="1")
    assert pure.returncode == 0, pure.stderr
    assert pure.stdout.startswith("False " + os.path.join(core, "_dispatch.py"))


def test_an_edited_pxd_is_stale_too(compiled_copy):
    core = os.path.join(compiled_copy, "pmapkit", "core", "hitpath")
    with open(os.path.join(core, "_shard_arg.pxd"), "a") as f:
        f.write("\n# a declaration change\n")
    stale = _import_in(compiled_copy, PMAPKIT_PUREPYTHON="0")
    assert "StaleBuildError" in stale.stderr and "_shard_arg" in stale.stderr
