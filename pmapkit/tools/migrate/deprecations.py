"""What JAX itself marks deprecated: names that still answer on this JAX but
warn (a ``DeprecationWarning`` a migrated file must not raise), read from
the ``_deprecations`` table each public JAX module keeps for its
``__getattr__``.

``modern(q)`` is the name to use instead where JAX's message names one that
is the very same object (``jax.core.Effect`` -> ``jax.extend.core.Effect``);
``message(q)`` is JAX's warning text for any deprecated name.
"""
from __future__ import annotations

import functools
import importlib
import re
import sys
import warnings

# Modules with deprecated names classic code reached, read even before the
# program's own imports would load them.
_READ_ALWAYS = ("jax.core", "jax.interpreters.pxla", "jax.experimental.shard_map",
                "jax.experimental.pjit")
_USE = re.compile(r"\b[Uu]sed? `?(jax(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`?")


@functools.lru_cache(maxsize=None)
def _table(owner):
    module = sys.modules.get(owner)
    if module is None and owner in _READ_ALWAYS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                module = importlib.import_module(owner)
            except ImportError:
                return {}
    table = getattr(module, "_deprecations", None)
    return table if isinstance(table, dict) else {}


def _entry(q):
    owner, _, attr = q.rpartition(".")
    if not owner.startswith("jax"):
        return None
    entry = _table(owner).get(attr)
    # (message, None) is a name already removed: not deprecated but gone.
    if not (isinstance(entry, tuple) and len(entry) == 2 and entry[1] is not None):
        return None
    return entry


def message(q):
    """JAX's deprecation message for the qualified name ``q``, or None."""
    entry = _entry(q)
    return None if entry is None else entry[0]


def modern(q):
    """The name JAX's message says to use instead of ``q`` when it is the same
    object (a drop-in rename), else None."""
    entry = _entry(q)
    if entry is None:
        return None
    match = _USE.search(entry[0])
    if match is None:
        return None
    target = match.group(1).rstrip(".")
    owner, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(owner)
    except ImportError:
        return None
    return target if getattr(module, attr, None) is entry[1] else None
