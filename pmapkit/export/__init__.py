"""``pmapkit.export``: the exported-function API of every vintage, with
self-checking artifacts.

One module, three vintages' names (README has the table):

- the seed's ``jax.experimental.jax2tf.jax_export``:
  ``export(fun, *, lowering_platform=None, strict_checks=True)(*specs)``,
  ``Exported``, ``call_exported(exp)(*args)``, ``poly_spec``/``poly_specs``,
  ``default_lowering_platform``, ``shape_and_dtype_jax_array``;
- ``jax.experimental.export`` (0.4.2x): ``export(fun, *,
  lowering_platforms=None, disabled_checks=())``, ``call(exp)(*args)``,
  ``serialize(exp, vjp_order=0)``/``deserialize``, ``DisabledSafetyCheck``,
  ``symbolic_shape``/``symbolic_args_specs``/``args_specs``,
  ``SymbolicScope``, ``is_symbolic_dim``,
  ``minimum/maximum_supported_serialization_version``;
- ``jax.export``: ``export(jitted, *, platforms=None, disabled_checks=())``,
  ``Exported.call``/``Exported.serialize``, ``deserialize``,
  ``default_export_platform``,
  ``minimum/maximum_supported_calling_convention_version``,
  ``register_pytree_node_serialization``,
  ``register_namedtuple_serialization``.

Interop: ``to_jax``/``from_jax``.

``serialize`` writes jax.export's payload inside pmapkit's container (magic,
container version, producer versions, payload length and CRC-32);
``deserialize`` checks all of it first and raises ``DeserializationError``
saying what is wrong with an empty, foreign, truncated, corrupted or crafted
blob.

Multi-process runs: an artifact serialized in one process deserializes and
runs in every process of a run with the devices it was lowered for. A
``pmapkit.pmap`` exported there spans every process's devices (specs give
this process's slice, as a call would); a multi-device artifact takes global
values (a global ``jax.Array``, or the whole host value, the same on every
process) and returns global arrays.
"""
from jax.export import (
    SymbolicScope, is_symbolic_dim, maximum_supported_calling_convention_version,
    minimum_supported_calling_convention_version,
    register_namedtuple_serialization, register_pytree_node_serialization)

# The JAX boundary defines pmapkit's config options: at this import, not at
# a first call (a multi-device call reads the active mesh).
from pmapkit import _jax_private  # noqa: F401
from pmapkit.export._container import CONTAINER_VERSION, SUPPORTED_CONTAINER_VERSIONS
from pmapkit.export._errors import DeserializationError
from pmapkit.export._exported import Exported, from_jax, to_jax
from pmapkit.export._serialize import artifact_info, deserialize, serialize

# Loaded on first use, so a program that loads an artifact imports no more
# than what it runs: the exporter (``export`` and its platform defaults)
# needs pmapkit's lowering and its pmap/pjit; the call path (``_call``: its
# first call imports it), shape polymorphism and the safety checks are
# pieces of their own.
_LAZY = {
    "default_export_platform": "_export", "default_lowering_platform": "_export",
    "export": "_export",
    "DeviceCountError": "_call", "call": "_call", "call_exported": "_call",
    "args_specs": "_poly", "poly_spec": "_poly", "poly_specs": "_poly",
    "shape_and_dtype_jax_array": "_poly", "symbolic_args_specs": "_poly",
    "symbolic_shape": "_poly",
    "DisabledSafetyCheck": "_safety",
}


def _exported_call(self, *args, **kwargs):
    """Run the exported function (top level, or inside jit/grad/vmap)."""
    from pmapkit.export import _call
    return _call.caller_of(self)(*args, **kwargs)


_exported_call.__name__, _exported_call.__qualname__ = "call", "Exported.call"
Exported.call = _exported_call


def __getattr__(name):
    where = _LAZY.get(name)
    if where is not None:
        import importlib
        value = getattr(importlib.import_module(f"pmapkit.export.{where}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


#: jax.experimental.export's names for the calling-convention range.
minimum_supported_serialization_version = minimum_supported_calling_convention_version
maximum_supported_serialization_version = maximum_supported_calling_convention_version

__all__ = [
    "CONTAINER_VERSION", "DeserializationError", "DeviceCountError",
    "DisabledSafetyCheck",
    "Exported", "SUPPORTED_CONTAINER_VERSIONS", "SymbolicScope", "args_specs",
    "artifact_info", "call", "call_exported", "default_export_platform",
    "default_lowering_platform", "deserialize", "export", "from_jax",
    "is_symbolic_dim", "maximum_supported_calling_convention_version",
    "maximum_supported_serialization_version",
    "minimum_supported_calling_convention_version",
    "minimum_supported_serialization_version", "poly_spec", "poly_specs",
    "register_namedtuple_serialization", "register_pytree_node_serialization",
    "serialize", "shape_and_dtype_jax_array", "symbolic_args_specs",
    "symbolic_shape", "to_jax"]
