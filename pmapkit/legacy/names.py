"""The removed JAX names that classic programs use around pmap/pjit: the
census behind ``pmapkit.legacy``.

Each entry says which JAX release removed the name, what serves it under
``pmapkit run`` (a faithful equivalent on this JAX) or, where there is none,
that touching it raises a ``RemovedFromJax`` error naming the release and the
modern replacement. ``modern`` / ``example`` are the migration map that
``pmapkit run --report`` prints. The values here are built on demand; where
and whether they are installed is ``pmapkit.legacy``'s job.
"""
from __future__ import annotations

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.legacy import pmap_sharding

__all__ = ["Removed", "RemovedFromJax", "RemovedAttributeError", "RemovedModuleError",
           "NAMES", "MODULES", "PROPERTIES", "SHARDING_PROPERTIES", "REFUSED_NAMES",
           "REFUSED_MODULES",
           "SYSTEMS", "by_name"]


class RemovedFromJax(Exception):
    """Raised where a program touches a name JAX removed that has no faithful
    equivalent on this JAX; the message names the release and the modern API."""


class RemovedAttributeError(RemovedFromJax, AttributeError):
    """A removed function or class (an AttributeError: ``hasattr`` and
    ``getattr(m, name, default)`` still see it missing)."""


class RemovedModuleError(RemovedFromJax, ImportError):
    """A removed module (an ImportError, raised by its import), or a removed
    name in ``from module import name``."""


@dataclasses.dataclass(frozen=True)
class Removed:
    name: str          # the classic public name, e.g. "jax.tree_map"
    removed_in: str    # the JAX release without it
    modern: str        # what to use on JAX 0.10
    example: str       # one line of the modern spelling
    served_by: str = ""   # what pmapkit installs ("" for a refused name)
    make: object = None   # () -> the installed value (None for a refused name)
    # ``pmapkit migrate`` renames the name to ``modern`` when that is a dotted
    # name on this JAX and: True, a drop-in spelling; None, only if it is the
    # very object ``make`` serves; False, never.
    rename: bool | None = None

    @property
    def attr(self):
        return self.name.rpartition(".")[2]

    @property
    def owner(self):
        return self.name.rpartition(".")[0]

    def error(self, importing=False):
        """The error to raise; ``importing``: the name is being read by
        ``from owner import name``, where Python would turn an
        AttributeError into its own generic ImportError."""
        text = (f"{self.name} was removed in JAX {self.removed_in} and has no "
                f"faithful equivalent on JAX {jax.__version__}, so pmapkit.legacy "
                f"does not provide it: use {self.modern} instead, e.g. {self.example}")
        if importing or self in REFUSED_MODULES:
            return RemovedModuleError(text, name=self.name)
        return RemovedAttributeError(text)


# -- values ---------------------------------------------------------------------

def _tree(name):
    return lambda: getattr(jax.tree_util, name)


def _index_op(method, name):
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


def _tie_in():
    def tie_in(x, y):
        """jax.lax.tie_in as JAX had it since 0.2.0: a no-op returning ``y``."""
        return y
    tie_in.__module__ = "jax.lax"
    return tie_in


def _shuffle():
    def shuffle(key, x, axis=0):
        """jax.random.shuffle as JAX before 0.4.31 had it: each vector along
        ``axis`` shuffled independently (permutation(..., independent=True))."""
        return jax.random.permutation(key, x, axis, independent=True)
    shuffle.__module__ = "jax.random"
    return shuffle


def _profiler_alias(modern):
    return lambda: getattr(jax.profiler, modern)


def _array_type():
    return jax.Array


def _device_buffers(self):
    # The array's devices in its sharding's order (a pmap's devices for a
    # pmap output), one single-device array each. A pmap output's buffers
    # have no mapped axes, as classic pmap's had none (each is one device's
    # value); others keep the shard's shape, as 0.4-era jax.Array had it.
    buffers = [shard.data for shard in self.addressable_shards]
    mapped = pmap_sharding.mapped_dims(self.sharding)
    if not mapped:
        return buffers
    return [jnp.squeeze(b, mapped) for b in buffers]


def _device_buffer(self):
    buffers = _device_buffers(self)
    if len(buffers) == 1:
        return buffers[0]
    raise ValueError("Length of buffers is greater than 1. Please use "
                     "`.device_buffers` instead.")


def _config_module():
    module = types.ModuleType("jax.config", "The jax.config module of JAX before "
                              "0.4.29: its `config` is JAX's config object.")
    module.config = jax.config
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


def _abstract_arrays_module():
    def missing(attr):
        raise RemovedAttributeError(
            f"jax.abstract_arrays.{attr} was removed with jax.abstract_arrays in JAX "
            "0.4.17; pmapkit.legacy serves only jax.abstract_arrays.ShapedArray "
            "(jax.core.ShapedArray). Use jax.core instead.")
    return stand_in_module("jax.abstract_arrays", "jax.abstract_arrays as JAX before "
                           "0.4.17 had it: ShapedArray only.", missing,
                           ShapedArray=jax.core.ShapedArray)


def _api_module():
    def missing(attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(jax, attr)
    return stand_in_module("jax.api", "jax.api as JAX before 0.2.21 had it: the "
                           "public functions of the jax package.", missing)


def _import(name):
    def make():
        import importlib
        return importlib.import_module(name)
    return make


# -- the census -----------------------------------------------------------------
# Names installed on an existing JAX module (set only where it lacks them).
_TREE = "jax.tree_util.{0}"
NAMES = tuple(
    [Removed(f"jax.{n}", "0.6.0", f"jax.tree.{n.removeprefix('tree_')}",
             f"jax.tree.{n.removeprefix('tree_')}(...)  # or jax.tree_util.{n}",
             _TREE.format(n), _tree(n), rename=True)
     for n in ("tree_map", "tree_leaves", "tree_flatten", "tree_unflatten",
               "tree_structure", "tree_transpose")]
    + [Removed("jax.treedef_is_leaf", "0.6.0", "jax.tree_util.treedef_is_leaf",
               "jax.tree_util.treedef_is_leaf(treedef)",
               "jax.tree_util.treedef_is_leaf", _tree("treedef_is_leaf")),
       Removed("jax.tree_multimap", "0.3.16", "jax.tree.map",
               "jax.tree.map(lambda a, b: a + b, xs, ys)", "jax.tree_util.tree_map",
               _tree("tree_map"), rename=True),
       Removed("jax.tree_util.tree_multimap", "0.3.16", "jax.tree_util.tree_map",
               "jax.tree_util.tree_map(lambda a, b: a + b, xs, ys)",
               "jax.tree_util.tree_map", _tree("tree_map")),
       Removed("jax.ops.index", "0.3.2", "plain index expressions with .at[]",
               "x.at[1:3].set(0.0)", "numpy.s_", lambda: np.s_)]
    + [Removed(f"jax.ops.{name}", "0.3.2", f"x.at[idx].{method}(y)",
               f"x = x.at[0, 1:].{method}(y)", f"x.at[idx].{method}(y)",
               _index_op(method, name))
       for name, method in (("index_update", "set"), ("index_add", "add"),
                            ("index_mul", "multiply"), ("index_min", "min"),
                            ("index_max", "max"))]
    + [Removed("jax.numpy.DeviceArray", "0.4.14", "jax.Array",
               "isinstance(x, jax.Array)", "jax.Array", _array_type),
       Removed("jax.interpreters.xla.DeviceArray", "0.4.11", "jax.Array",
               "isinstance(x, jax.Array)", "jax.Array", _array_type),
       Removed("jax.interpreters.pxla.ShardedDeviceArray", "0.4.14", "jax.Array",
               "isinstance(x, jax.Array)", "jax.Array", _array_type),
       Removed("jax.random.KeyArray", "0.4.24", "jax.Array",
               "def init(key: jax.Array): ...", "jax.Array", _array_type),
       Removed("jax.random.PRNGKeyArray", "0.4.24", "jax.Array",
               "def init(key: jax.Array): ...", "jax.Array", _array_type),
       Removed("jax.random.shuffle", "0.4.31",
               "jax.random.permutation(..., independent=True)",
               "jax.random.permutation(key, x, axis=0, independent=True)",
               "jax.random.permutation(key, x, axis, independent=True)", _shuffle),
       Removed("jax.profiler.TraceContext", "0.3.15", "jax.profiler.TraceAnnotation",
               "with jax.profiler.TraceAnnotation('name'): ...",
               "jax.profiler.TraceAnnotation", _profiler_alias("TraceAnnotation")),
       Removed("jax.profiler.StepTraceContext", "0.3.15", "jax.profiler.StepTraceAnnotation",
               "with jax.profiler.StepTraceAnnotation('train', step_num=i): ...",
               "jax.profiler.StepTraceAnnotation", _profiler_alias("StepTraceAnnotation")),
       Removed("jax.profiler.trace_function", "0.3.15", "jax.profiler.annotate_function",
               "f = jax.profiler.annotate_function(f)",
               "jax.profiler.annotate_function", _profiler_alias("annotate_function")),
       Removed("jax.sharding.PmapSharding", "0.10.0", "jax.sharding.NamedSharding",
               "NamedSharding(Mesh(devices, ('i',)), P('i'))",
               "pmapkit.legacy.pmap_sharding.PmapSharding (pmap layouts as NamedSharding)",
               lambda: pmap_sharding.PmapSharding),
       Removed("jax.lax.tie_in", "0.4.29", "nothing (a no-op since JAX 0.2.0)",
               "y  # instead of lax.tie_in(x, y)", "a no-op returning y", _tie_in)])

# Properties installed on JAX's array type.
PROPERTIES = (
    Removed("jax.Array.device_buffers", "0.4.27", "x.addressable_shards",
            "[s.data for s in x.addressable_shards]",
            "[s.data for s in x.addressable_shards]",
            lambda: _device_buffers),
    Removed("jax.Array.device_buffer", "0.4.27", "x.addressable_data(0)",
            "x.addressable_data(0)", "the one addressable shard's data",
            lambda: _device_buffer),
)

# Properties installed on JAX's NamedSharding (pmap layouts only).
SHARDING_PROPERTIES = (
    Removed("jax.sharding.PmapSharding.devices", "0.10.0", "sharding.mesh.devices",
            "list(x.sharding.mesh.devices.flat)", "the pmap layout's mesh devices",
            lambda: pmap_sharding.pmap_devices),
)

# Modules served by pmapkit.legacy's finder (jax.config: see _installer.py).
MODULES = (
    Removed("jax.experimental.optimizers", "0.3.16", "jax.example_libraries.optimizers",
            "from jax.example_libraries import optimizers",
            "jax.example_libraries.optimizers", _import("jax.example_libraries.optimizers")),
    Removed("jax.experimental.stax", "0.3.16", "jax.example_libraries.stax",
            "from jax.example_libraries import stax",
            "jax.example_libraries.stax", _import("jax.example_libraries.stax")),
    Removed("jax.config", "0.4.29", "the jax.config attribute",
            "import jax; jax.config.update('jax_enable_x64', True)",
            "a module whose config is jax.config", _config_module),
    Removed("jax.abstract_arrays", "0.4.17", "jax.core.ShapedArray",
            "jax.core.ShapedArray((2, 3), jnp.float32)",
            "a module with ShapedArray = jax.core.ShapedArray", _abstract_arrays_module),
    Removed("jax.api", "0.2.21", "the jax package", "from jax import jit, grad, vmap",
            "a module forwarding to jax's public names", _api_module),
)

# Names that get a clear error where they are touched.
REFUSED_NAMES = (
    Removed("jax.experimental.maps.xmap", "0.4.31", "jax.shard_map",
            "jax.shard_map(f, mesh=mesh, in_specs=P('x'), out_specs=P('x'))"),
    Removed("jax.experimental.maps.serial_loop", "0.4.31", "jax.lax.scan / jax.lax.map",
            "jax.lax.map(f, xs, batch_size=8)"),
    Removed("jax.experimental.maps.SerialLoop", "0.4.31", "jax.lax.scan / jax.lax.map",
            "jax.lax.map(f, xs, batch_size=8)"),
    Removed("jax.xla_computation", "0.4.34", "the AOT API",
            "jax.jit(f).lower(*args).as_text()"),
    Removed("jax.soft_pmap", "0.3.18", "jax.vmap, or jax.shard_map over a mesh",
            "jax.shard_map(f, mesh=mesh, in_specs=P('i'), out_specs=P('i'))"),
    Removed("jax.custom_transforms", "0.2.12", "jax.custom_jvp / jax.custom_vjp",
            "f = jax.custom_jvp(f); f.defjvp(f_jvp)"),
    Removed("jax.interpreters.pxla.make_sharded_device_array", "0.4.14",
            "jax.make_array_from_single_device_arrays",
            "jax.make_array_from_single_device_arrays(shape, sharding, arrays)"),
)

REFUSED_MODULES = (
    Removed("jax.experimental.global_device_array", "0.4.7",
            "jax.Array with jax.make_array_from_callback",
            "jax.make_array_from_callback(shape, NamedSharding(mesh, P('x')), "
            "lambda idx: data[idx])"),
    Removed("jax.experimental.loops", "0.3.16", "jax.lax.fori_loop / jax.lax.scan",
            "jax.lax.fori_loop(0, n, body, init)"),
    Removed("jax.experimental.optix", "0.2.7", "the optax package",
            "import optax; opt = optax.adam(1e-3)"),
    Removed("jax.experimental.sharded_jit", "0.3.16", "jax.jit with in_shardings",
            "jax.jit(f, in_shardings=NamedSharding(mesh, P('x')))"),
    Removed("jax.linear_util", "0.4.24", "jax.extend.linear_util (JAX internals)",
            "from jax.extend import linear_util as lu"),
)

# The classic systems pmapkit itself provides (for the report only).
SYSTEMS = (
    Removed("jax.experimental.pjit.pjit", "0.4.14 (in_axis_resources)",
            "jax.jit with in_shardings/out_shardings",
            "jax.jit(f, in_shardings=NamedSharding(mesh, P('x')))", "pmapkit.pjit"),
    Removed("jax.experimental.pjit.with_sharding_constraint", "0.4.14 (pjit era)",
            "jax.lax.with_sharding_constraint",
            "jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P('x')))",
            "pmapkit.with_sharding_constraint"),
    Removed("jax.experimental.maps", "0.4.31", "jax.sharding.Mesh + jax.set_mesh",
            "with jax.set_mesh(jax.sharding.Mesh(devs, ('x',))): ...", "pmapkit.maps"),
    Removed("jax.experimental.host_callback", "0.8.0", "jax.debug.callback / "
            "jax.experimental.io_callback", "jax.debug.callback(print, x)",
            "pmapkit.host_callback"),
    Removed("jax.experimental.jax2tf.jax_export", "0.4.22", "jax.export",
            "jax.export.export(jax.jit(f))(*specs)", "pmapkit.export"),
    Removed("jax.experimental.export", "0.4.36", "jax.export",
            "jax.export.export(jax.jit(f))(*specs)", "pmapkit.export"),
    Removed("jax.device_put_replicated", "0.10.0", "jax.device_put",
            "jax.device_put(x, NamedSharding(mesh, P()))", "pmapkit.device_put_replicated"),
    Removed("jax.device_put_sharded", "0.10.0", "jax.device_put",
            "jax.device_put(stacked, NamedSharding(mesh, P('x')))",
            "pmapkit.device_put_sharded"),
    Removed("jax.pmap", "0.10.0 (the C++ pmap)", "jax.shard_map under jax.jit",
            "jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P('i'), out_specs=P('i')))",
            "pmapkit.pmap"),
)

_ALL = {r.name: r for group in (NAMES, PROPERTIES, SHARDING_PROPERTIES, MODULES,
                                REFUSED_NAMES, REFUSED_MODULES, SYSTEMS) for r in group}


def by_name(name):
    return _ALL[name]


def known(name):
    return name in _ALL


def array_type():
    """JAX's concrete array class, where the device_buffers properties go."""
    return jp.ArrayImpl
