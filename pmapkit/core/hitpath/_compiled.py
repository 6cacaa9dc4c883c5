"""Chooses the compiled or the pure-Python build of the hit-path modules.

``PMAPKIT_PUREPYTHON=1`` (read once, at import) loads the ``.py`` sources of
every hit-path module (``_source_hash.MODULES``: ``_keys``, ``_feed``,
``_lru``, ``_express``, ``_miss``, ``_dispatch``, ``_shard_arg``) even when
the compiled extensions are installed: each under its own name, in the
order they import one another, so that a source importing a sibling gets
the sibling's source too, never a compiled module beside it. Otherwise the
extensions are used, and where they are missing Python's import finds the
same sources, so behaviour is identical.

A compiled extension carries the hash of the sources it was built from
(``BUILT_FROM``, stamped by setup.py). One whose sources beside it hash
otherwise (a ``.py`` edited, not rebuilt), one carrying no hash, and one
beside part of its sources are refused with an ImportError naming the
rebuild command (``check_fresh``): it would run old code while the tests
read the new. Refused, not replaced by the pure build: a silent fallback would
report the compiled core as tested when it was not, and change the speed
of every call without a word. ``PMAPKIT_PUREPYTHON=1`` is the explicit way
to run the sources without rebuilding.

Where the extensions are missing (a source checkout on ``sys.path``, before
a build) the pure build runs unasked: one line on stderr says so, as the
speed of every call depends on it, with what to do where the reader is
(``_pure_notice``); ``PMAPKIT_PUREPYTHON=1`` silences it.
"""
import importlib
import importlib.util
import os
import sys

from pmapkit.core.hitpath import _source_hash

PURE_PYTHON_REQUESTED = os.environ.get("PMAPKIT_PUREPYTHON", "") not in ("", "0")

_HERE = os.path.dirname(os.path.abspath(__file__))


class StaleBuildError(ImportError):
    """A compiled module built from other sources than those beside it."""


def _load_source(name):
    qualified = f"pmapkit.core.hitpath.{name}"
    loaded = sys.modules.get(qualified)
    if loaded is not None:
        if _is_extension(loaded):
            raise ImportError(
                f"pmapkit: PMAPKIT_PUREPYTHON=1, but the compiled {qualified} was "
                "imported before pmapkit.core.hitpath._compiled chose the build.")
        return loaded
    spec = importlib.util.spec_from_file_location(qualified, os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module


def _load(name):
    if PURE_PYTHON_REQUESTED:
        return _load_source(name)
    module = importlib.import_module(f"pmapkit.core.hitpath.{name}")
    if _is_extension(module):
        check_fresh(module, name)
    return module


def check_fresh(module, name):
    """Raise ``StaleBuildError`` unless compiled ``module`` carries the hash
    of the sources of ``name`` beside it, those the pure build runs.

    Refused: an extension with no hash (``BUILT_FROM`` missing or empty:
    built otherwise than by pmapkit's setup.py, so nothing tells what from);
    one whose hash differs from the sources' (edited since); one beside only
    part of its sources (nothing whole to compare). Accepted without a
    comparison only where none of its sources is beside it and it carries a
    hash: an install shipping the extension alone, which nothing there can
    contradict, and nothing else could run (the pure build is its sources).
    """
    directory = _HERE
    paths = _source_hash.source_paths(directory, name)
    missing = [os.path.basename(p) for p in paths if not os.path.exists(p)]
    built = getattr(module, "BUILT_FROM", None)
    if not isinstance(built, str) or not built:
        what = "carries no source hash (built without pmapkit's setup.py)"
    elif len(missing) == len(paths):
        return
    elif missing:
        what = (f"was built from {' and '.join(os.path.basename(p) for p in paths)}, "
                f"but {' and '.join(missing)} is missing in {directory}")
    elif built == _source_hash.source_hash(directory, name):
        return
    else:
        what = ("was built from other sources than "
                + " and ".join(os.path.basename(p) for p in paths)
                + f" in {directory} (edited since the last build)")
    raise StaleBuildError(
        f"pmapkit: the compiled module {module.__file__} {what}: it would run "
        f"old code. Rebuild it from the checkout root with "
        f"`{_source_hash.REBUILD_COMMAND}` (needs `pip install -e '.[dev]'`), "
        "or set PMAPKIT_PUREPYTHON=1 to run the pure-Python sources.")


def _is_extension(module):
    return os.path.splitext(getattr(module, "__file__", "") or "")[1] in (".so", ".pyd")


_loaded = {name: _load(name) for name in _source_hash.MODULES}

#: The rooms of the hit path (see ARCHITECTURE.md): the key format, feeding
#: a call, the shared LRU, the express call, the miss path, the call itself,
#: and the put of host values.
keys = _loaded["_keys"]
feed = _loaded["_feed"]
lru = _loaded["_lru"]
express = _loaded["_express"]
miss = _loaded["_miss"]
dispatch = _loaded["_dispatch"]
shard_arg = _loaded["_shard_arg"]

#: True when every hit-path module is a Cython extension.
COMPILED = all(_is_extension(module) for module in _loaded.values())


def _say_the_pure_build_runs_unasked():
    if PURE_PYTHON_REQUESTED or COMPILED:
        return
    from pmapkit.core.hitpath import _pure_notice
    sys.stderr.write(_pure_notice.line(os.path.dirname(os.path.dirname(_HERE))))


_say_the_pure_build_runs_unasked()
