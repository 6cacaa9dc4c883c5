"""A compiled core built from other sources than those beside it is refused.

Each extension carries the SHA-256 of the sources setup.py built it from
(``BUILT_FROM``); ``pmapkit.core.hitpath._compiled`` compares it with the ``.py`` and
``.pxd`` it would otherwise run as the pure build. Checked on a copy of the
installed package in a fresh process: untouched it loads compiled; with
``_dispatch.py`` edited it raises ``StaleBuildError`` naming the rebuild
command; ``PMAPKIT_PUREPYTHON=1`` still runs the edited sources. An extension
carrying no hash (its stamp cut out of the copy's binary) is refused, with
or without its sources beside it; one beside only part of its sources too;
one carrying its hash with none of its sources beside it is accepted.
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


def _strip_hash(core, name):
    """The copy's extension ``name`` made to carry an empty hash: its stamped
    string (a NUL-terminated C literal in the binary) cut to nothing, as a
    build by another tool than pmapkit's setup.py leaves it."""
    (path,) = glob.glob(os.path.join(core, name + ".*.so"))
    stamped = _source_hash.source_hash(core, name).encode("ascii")
    with open(path, "rb") as f:
        binary = f.read()
    assert binary.count(stamped + b"\0") == 1, "the hash is stamped once"
    with open(path, "wb") as f:
        f.write(binary.replace(stamped + b"\0", b"\0" * (len(stamped) + 1)))


def test_a_compiled_module_without_a_source_hash_is_refused(compiled_copy):
    core = os.path.join(compiled_copy, "pmapkit", "core", "hitpath")
    _strip_hash(core, "_dispatch")
    probe = ("import pmapkit.core.hitpath._dispatch as d; print(repr(d.BUILT_FROM))")
    environ = {k: v for k, v in os.environ.items() if k != "PMAPKIT_PUREPYTHON"}
    direct = subprocess.run([sys.executable, "-c", probe], cwd=compiled_copy,
                            env=dict(environ, PYTHONPATH=compiled_copy),
                            capture_output=True, text=True, timeout=120)
    assert direct.stdout.strip() == "''", direct.stdout + direct.stderr
    stale = _import_in(compiled_copy)
    assert stale.returncode != 0
    assert "StaleBuildError" in stale.stderr, stale.stderr
    assert "carries no source hash" in stale.stderr
    assert _source_hash.REBUILD_COMMAND in stale.stderr
    # Even with its sources gone: no hash, nothing tells what it was built from.
    for suffix in _source_hash.SOURCE_SUFFIXES:
        os.remove(os.path.join(core, "_dispatch" + suffix))
    alone = _import_in(compiled_copy)
    assert "StaleBuildError" in alone.stderr and "carries no source hash" in alone.stderr


def test_a_compiled_module_beside_part_of_its_sources_is_refused(compiled_copy):
    # The .py there (what the pure build runs) without the .pxd: the hash
    # cannot be checked, so nothing says the extension runs that .py.
    core = os.path.join(compiled_copy, "pmapkit", "core", "hitpath")
    os.remove(os.path.join(core, "_shard_arg.pxd"))
    stale = _import_in(compiled_copy)
    assert stale.returncode != 0
    assert "StaleBuildError" in stale.stderr, stale.stderr
    assert "_shard_arg.pxd is missing" in stale.stderr


def test_a_hashed_compiled_module_alone_is_accepted(compiled_copy):
    # An install shipping the extensions without their sources: nothing there
    # can differ from what they run, and nothing else could run.
    core = os.path.join(compiled_copy, "pmapkit", "core", "hitpath")
    for name in ("_dispatch", "_shard_arg"):
        for suffix in _source_hash.SOURCE_SUFFIXES:
            os.remove(os.path.join(core, name + suffix))
    alone = _import_in(compiled_copy)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.startswith("True " + os.path.join(core, "_dispatch.")), alone.stdout


def test_a_module_is_stale_when_a_pxd_it_cimports_changes(tmp_path):
    # _dispatch is compiled against the declarations of the rooms it
    # cimports (their struct layouts, their C functions): an edit there
    # changes what its binary must be, so it changes _dispatch's hash too.
    core = tmp_path / "hitpath"
    shutil.copytree(CORE, core, ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.so"))
    assert "_feed" in _source_hash.cimported(str(core), "_dispatch")
    before = {name: _source_hash.source_hash(str(core), name) for name in _source_hash.MODULES}
    with open(core / "_feed.pxd", "a") as f:
        f.write("\n# a declaration change\n")
    after = {name: _source_hash.source_hash(str(core), name) for name in _source_hash.MODULES}
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"_feed", "_lru", "_express", "_miss", "_dispatch"}
