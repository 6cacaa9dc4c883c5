"""The values pmapkit.legacy serves for removed JAX names that are built
here, not in ``classic_values``: adapters for the ``jax.ops.index_*``
functions, the array's classic buffers, and the stand-in modules
(``jax.config``, ``jax.abstract_arrays``, ``jax.api``, ``jax.experimental.optix``).
Each builder returns the value; nothing is installed by importing this."""
from __future__ import annotations

import types

import jax
import jax.numpy as jnp

from pmapkit import _jax_private as jp
from pmapkit.legacy import classic_config
from pmapkit.legacy import classic_values as cv
from pmapkit.legacy import pmap_sharding
from pmapkit.legacy.removed import (Removed, RemovedAttributeError, RemovedModuleError,
                                    removal_release)

__all__ = ["abstract_arrays_module", "api_module", "array_type", "array_type_value",
           "config_module", "device_buffer", "device_buffers", "import_module", "index_op",
           "local_data", "local_shards", "optix_module", "profiler_alias", "refuse_assignment", "refused", "served",
           "sharding_spec_property", "shuffle", "stand_in_module", "tie_in",
           "tree_function"]


def tree_function(name):
    return lambda: getattr(jax.tree_util, name)


def index_op(method, name):
    def make():
        def op(x, idx, y, indices_are_sorted=False, unique_indices=False):
            return getattr(jnp.asarray(x).at[idx], method)(
                y, indices_are_sorted=indices_are_sorted, unique_indices=unique_indices)
        op.__name__ = op.__qualname__ = name
        op.__module__ = "jax.ops"
        op.__doc__ = (f"jax.ops.{name}(x, idx, y) as JAX before 0.3.2 had it: "
                      f"x.at[idx].{method}(y), a new array.")
        return op
    return make


def tie_in():
    def tie_in(x, y):
        """jax.lax.tie_in as JAX had it since 0.2.0: a no-op returning ``y``."""
        return y
    tie_in.__module__ = "jax.lax"
    return tie_in


def shuffle():
    def shuffle(key, x, axis=0):
        """jax.random.shuffle as JAX before 0.4.31 had it: each vector along
        ``axis`` shuffled independently (permutation(..., independent=True))."""
        return jax.random.permutation(key, x, axis, independent=True)
    # pickled by reference, as jax.random.shuffle (where it is served)
    shuffle.__module__, shuffle.__qualname__ = "jax.random", "shuffle"
    return shuffle


def profiler_alias(modern):
    return lambda: getattr(jax.profiler, modern)


def array_type_value():
    return jax.Array


def device_buffers(self):
    # The array's devices in its sharding's order (a pmap's devices for a
    # pmap output), one single-device array each. A pmap output's buffers
    # (pmapkit.pmap's or jax.pmap's, with or without an axis name) have no
    # mapped axes, as classic pmap's had none (each is one device's value);
    # others keep the shard's shape, as 0.4-era jax.Array had it.
    buffers = [shard.data for shard in self.addressable_shards]
    mapped = pmap_sharding.mapped_dims(self.sharding)
    if not mapped:
        return buffers
    return [jnp.squeeze(b, mapped) for b in buffers]


def local_shards():
    from pmapkit.legacy import global_device_array
    return global_device_array.local_shards


def refuse_assignment(name, modern):
    """The setter of classic array property ``name``: assigning it raises an
    AttributeError that says why (a jax.Array is immutable) and ``modern``."""
    def assign(self, value):
        raise RemovedAttributeError(
            f"{name} cannot be assigned on JAX {jax.__version__}: a jax.Array is "
            f"immutable (classic arrays let code swap their buffers); make a new array "
            f"instead, e.g. {modern}")
    return assign


def local_data():
    from pmapkit.legacy import global_device_array
    return global_device_array.local_data


def device_buffer(self):
    buffers = device_buffers(self)
    if len(buffers) == 1:
        return buffers[0]
    raise ValueError("Length of buffers is greater than 1. Please use "
                     "`.device_buffers` instead.")


def config_module():
    module = types.ModuleType("jax.config", "The jax.config module of JAX before "
                              "0.4.29: its `config` is JAX's config object.")
    module.config = jax.config
    module.FLAGS = classic_config.flags()     # the classic module's, over the values
    return module


def stand_in_module(name, doc, missing, **values):
    """A module ``name`` holding ``values``; any other public attribute is
    ``missing(attr)`` (a value, or it raises). Dunder lookups (``__path__``,
    ``__file__``...) stay plain AttributeErrors, as for any module."""
    module = types.ModuleType(name, doc)
    module.__dict__.update(values)

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return missing(attr)

    module.__getattr__ = __getattr__
    return module


def abstract_arrays_module():
    def missing(attr):
        raise RemovedAttributeError(
            f"jax.abstract_arrays.{attr} was removed with jax.abstract_arrays in JAX "
            f"{removal_release('jax.abstract_arrays')}; pmapkit.legacy serves only "
            "jax.abstract_arrays.ShapedArray (jax.core.ShapedArray). Use jax.core instead.")
    return stand_in_module("jax.abstract_arrays", "jax.abstract_arrays as JAX before "
                           f"{removal_release('jax.abstract_arrays')} had it: ShapedArray "
                           "only.", missing,
                           ShapedArray=jax.core.ShapedArray)


def api_module():
    def missing(attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(jax, attr)
    return stand_in_module("jax.api", "jax.api as JAX before 0.2.21 had it: the "
                           "public functions of the jax package.", missing)


def import_module(name):
    def make():
        import importlib
        return importlib.import_module(name)
    return make




def served(name, modern, example, served_by, make):
    return Removed(name, modern, example, served_by, make)


def refused(name, modern, example):
    return Removed(name, modern, example)


def sharding_spec_property(self):
    try:
        return cv.sharding_spec(self)
    except AttributeError as e:
        raise RemovedAttributeError(
            f"jax.Array.sharding_spec was removed in JAX "
            f"{removal_release('jax.Array.sharding_spec')} with ShardedDeviceArray "
            f"({e}): use x.sharding instead") from None



def optix_module():
    """``jax.experimental.optix`` (JAX 0.1.x-0.2.6): its functions live on,
    under the same names, in optax; served from optax when it is installed."""
    try:
        import optax
    except ImportError:
        raise RemovedModuleError(
            f"jax.experimental.optix was removed in JAX {removal_release('jax.experimental.optix')}"
            f" and has no faithful equivalent on JAX {jax.__version__} without optax: its "
            "functions live on in optax, which is not installed; install it "
            "(pip install optax) and pmapkit.legacy serves them under optix's names, "
            "or use optax instead, e.g. import optax; opt = optax.adam(1e-3)",
            name="jax.experimental.optix") from None

    def missing(attr):
        raise RemovedAttributeError(
            f"jax.experimental.optix.{attr} was removed in JAX "
            f"{removal_release('jax.experimental.optix')} and optax {optax.__version__} "
            f"has no {attr}: use optax instead")
    names = {n: getattr(optax, n) for n in dir(optax) if not n.startswith("_")}
    return stand_in_module("jax.experimental.optix", "jax.experimental.optix as JAX "
                           "0.1-0.2.6 had it: optax's functions under optix's names.",
                           missing, **names)


def array_type():
    """JAX's concrete array class, where the device_buffers properties go."""
    return jp.ArrayImpl
