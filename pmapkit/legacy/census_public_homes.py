"""``python -m pmapkit.legacy.census_public_homes [OUT]``: the census names
JAX still exports publicly under another name, found by identity on this JAX:
a classic internal module's name whose object (looked up where JAX holds it
now, ``names.PRIVATE_HOMES``) is the very object a public JAX module exports
(``jax.interpreters.ad.Tracer`` is ``jax.core.Tracer``), and a classic
top-level ``jax.X`` that a public module exports as a JAX class or function of
that name (``jax.Compiled`` is ``jax.stages.Compiled``), or a class another
classic module re-exported that a public module exports under its own name
(``jax.interpreters.xla.ShapedArray`` is ``jax.core.ShapedArray``). Written to
``census_data/public_homes.txt`` (one ``classic public`` pair a line), which
``census.public_homes()`` reads: such names are served as those objects, never
refused as having no public replacement (``tests/test_legacy_real_use_rule.py``
holds every refusal to that).
"""
from __future__ import annotations

import importlib
import os
import sys
import types
import typing
import warnings

from pmapkit.legacy import census
from pmapkit.legacy.census_modules import PUBLIC_MODULES

__all__ = ["public_index", "exported_as", "homes", "main"]

# Public modules searched: JAX's documented API (not the internals the census
# also reads, nor jax.experimental, whose modules come and go).
_SKIP = ("jax.experimental", "jax.interpreters", "jax.lib", "jax.util", "jax.api_util",
         "jax.linear_util", "jax.abstract_arrays", "jax.example_libraries")


def _plain(obj):
    """Objects whose identity says nothing (numbers, strings, typing forms)."""
    return (obj is None or isinstance(obj, (bool, int, float, str, bytes, tuple))
            or isinstance(obj, types.ModuleType)
            or getattr(obj, "__module__", None) in ("typing", "builtins", "functools")
            or isinstance(obj, (typing.TypeVar,)))


def public_index():
    """``{id(object): "module.name"}`` of every public JAX export (first seen)."""
    index = {}
    for module_name in PUBLIC_MODULES:
        if module_name.startswith(_SKIP):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                module = importlib.import_module(module_name)
            except Exception:     # a module this JAX lacks
                continue
            for attr in sorted(dir(module)):
                if attr.startswith("_"):
                    continue
                try:
                    obj = getattr(module, attr)
                except Exception:
                    continue
                if not _plain(obj):
                    index.setdefault(id(obj), (f"{module_name}.{attr}", obj))
    return index


def exported_as(name, index):
    """The public name of the object census name ``name`` had, or None."""
    from pmapkit.legacy.names import PRIVATE_HOMES
    owner, _, attr = name.rpartition(".")
    home = PRIVATE_HOMES.get(owner)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if home is not None:
            try:
                obj = getattr(importlib.import_module(home), attr)
            except Exception:
                return None
            found = index.get(id(obj))
            return found[0] if found and not _plain(obj) else None
    # a classic top-level name, or a class a classic module re-exported: the
    # public JAX function or class (top level), or class (elsewhere), of that name
    for public, obj in sorted(index.values(), key=lambda e: e[0]):
        if (public.rpartition(".")[2] == attr and getattr(obj, "__name__", None) == attr
                and str(getattr(obj, "__module__", "")).startswith("jax")
                and (owner == "jax" or isinstance(obj, type))):
            return public
    return None


def homes():
    """``{census name: public name}`` over the census names this JAX lacks
    and the internals real code reached that it lacks (``real_use_missing``)."""
    index = public_index()
    found = {}
    names = [f"{module}.{attr}" for module, attr in census.union()]
    for name in names + sorted(census.real_use_missing()):
        if name in names and not census.missing_here(name):
            continue
        public = exported_as(name, index)
        if public is not None and public != name:
            found[name] = public
    return found


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    out = argv[0] if argv else os.path.join(census._DATA, "public_homes.txt")
    found = homes()
    with open(out, "w") as f:
        f.write("# census names whose object JAX still exports under another public name, "
                "found by identity: python -m pmapkit.legacy.census_public_homes\n")
        for name in sorted(found):
            f.write(f"{name} {found[name]}\n")
    print(f"{len(found)} names -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
