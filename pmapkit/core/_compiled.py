"""Chooses the compiled or the pure-Python build of the dispatch modules.

``PMAPKIT_PUREPYTHON=1`` (read once, at import) loads the ``.py`` sources of
``_dispatch`` and ``_shard_arg`` under private names even when the compiled
extensions are installed; otherwise the extensions are used, and where they
are missing Python's import finds the same sources, so behaviour is identical.
"""
import importlib
import importlib.util
import os
import sys

PURE_PYTHON_REQUESTED = os.environ.get("PMAPKIT_PUREPYTHON", "") not in ("", "0")

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_source(name):
    qualified = f"pmapkit.core.{name}_pure"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module


def _load(name):
    if PURE_PYTHON_REQUESTED:
        return _load_source(name)
    return importlib.import_module(f"pmapkit.core.{name}")


def _is_extension(module):
    return os.path.splitext(getattr(module, "__file__", "") or "")[1] in (".so", ".pyd")


dispatch = _load("_dispatch")
shard_arg = _load("_shard_arg")

#: True when both hot-path modules are Cython extensions.
COMPILED = _is_extension(dispatch) and _is_extension(shard_arg)
