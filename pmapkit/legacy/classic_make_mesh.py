"""``jax.make_mesh`` with the axis types it gave from JAX 0.4.31 to 0.9.

``jax.make_mesh`` (added in JAX 0.4.31) built its mesh with ``Mesh``'s
default axis types, every axis ``Auto``, until JAX 0.10 made its default
``Explicit``. ``with_sharding_constraint`` refuses a ``NamedSharding``
whose spec names an ``Explicit`` axis, and sharding in types changes what
programs of 2024–2025 see.
Under ``pmapkit run`` (``install()``) ``jax.make_mesh`` without
``axis_types`` makes every axis ``Auto`` again; ``axis_types`` given is
JAX's, untouched (``jax.sharding.Mesh`` kept ``Auto`` as its default).
"""
from __future__ import annotations

import functools

import jax

_MARK = "_pmapkit_classic_axis_types"


def classic_auto_axes() -> bool:
    """Install the classic ``jax.make_mesh`` on ``jax`` (once per process);
    True when this call did."""
    modern = getattr(jax, "make_mesh", None)
    if modern is None or getattr(modern, _MARK, False):
        return False

    @functools.wraps(modern)
    def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
        if axis_types is None:
            try:
                count = len(axis_shapes)
            except TypeError:
                count = None      # JAX's own refusal of axis_shapes follows
            if count is not None:
                axis_types = (jax.sharding.AxisType.Auto,) * count
        return modern(axis_shapes, axis_names, axis_types, devices=devices)

    setattr(make_mesh, _MARK, True)
    jax.make_mesh = make_mesh
    return True
