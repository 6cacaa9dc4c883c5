"""Classic names real programs use, each with a same-behaviour modern target:
``jax.ShapedArray`` / ``jax.abstract_arrays.ShapedArray`` → ``jax.core.ShapedArray``;
``xla_bridge.device_count()`` (and its other device queries) → ``jax.device_count()``
...; ``xla_bridge.get_backend().platform`` → ``jax.default_backend()`` (the
transformer's attribute rule, ``BACKEND_PLATFORM``); ``jax.experimental.optix``
→ ``optax`` (its names mapped: ``optix.InitUpdate`` is
``optax.GradientTransformation``, ``additive_weight_decay`` is
``add_decayed_weights``); ``x.to_py()`` → ``numpy.asarray(x)`` (``TO_PY``);
``config.enable_omnistaging()`` dropped (omnistaging is all JAX does:
``DROPPED_CALLS``); ``config.update("jax_default_matmul_precision",
lax.Precision.HIGHEST)`` → ``"highest"`` (classic config took the enum
member; JAX 0.10 takes its name)."""
from __future__ import annotations

import jax
import libcst as cst

from pmapkit.legacy.classic_config import PRECISION_OPTIONS
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family

_XLA_BRIDGES = ("jax.lib.xla_bridge", "jax.interpreters.xla.xb", "jax.lib.xla_client.xla_bridge")
_DEVICE_QUERIES = {"device_count": "jax.device_count", "local_device_count":
                   "jax.local_device_count", "devices": "jax.devices", "local_devices":
                   "jax.local_devices", "process_index": "jax.process_index", "process_count":
                   "jax.process_count", "host_id": "jax.process_index", "host_count":
                   "jax.process_count", "default_backend": "jax.default_backend"}
#: ``<get_backend>().platform``: the platform of the default backend.
BACKEND_PLATFORM = {f"{bridge}.get_backend" for bridge in _XLA_BRIDGES}
#: ``<x>.to_py()``: the array's value as numpy.
TO_PY = "to_py"
#: statements that did what JAX now always does: dropped.
DROPPED_CALLS = ("jax.config.enable_omnistaging", "jax.config.config.enable_omnistaging")
#: ``config.update(option, value)`` setting what JAX now always does: dropped.
DROPPED_UPDATES = {("jax_omnistaging", "True")}
CONFIG_UPDATES = ("jax.config.update", "jax.config.config.update")
OPTIX = "jax.experimental.optix"
_OPTIX_RENAMES = {"InitUpdate": "GradientTransformation",
                  "additive_weight_decay": "add_decayed_weights"}


_PRECISION_ENUMS = ("jax.lax.Precision", "jax.lax.lax.Precision")


def _config_update(ctx, original, updated):
    """``update(<precision option>, Precision.X)`` → ``update(option, "x")``;
    any other update is not this rule's (None)."""
    args = original.args
    if len(args) != 2 or not isinstance(args[0].value, cst.SimpleString) or (
            args[0].value.evaluated_value not in PRECISION_OPTIONS):
        return None
    value = ctx.qualname(args[1].value)
    enum, _, member = (value or "").rpartition(".")
    if enum not in _PRECISION_ENUMS or member not in jax.lax.Precision.__members__:
        return None
    return f"{sx.code(updated.func)}({sx.code(updated.args[0].value)}, {member.lower()!r})"


def family():
    moves = {"jax.ShapedArray": "jax.core.ShapedArray",
             "jax.abstract_arrays.ShapedArray": "jax.core.ShapedArray",
             OPTIX: "optax"}
    for bridge in _XLA_BRIDGES:
        moves.update({f"{bridge}.{name}": target for name, target in _DEVICE_QUERIES.items()})
    moves.update({f"{OPTIX}.{old}": f"optax.{new}" for old, new in _OPTIX_RENAMES.items()})
    return Family("classic", moves=moves,
                  calls={update: _config_update for update in CONFIG_UPDATES})
