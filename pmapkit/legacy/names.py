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
from pmapkit.legacy import census
from pmapkit.legacy import classic_config
from pmapkit.legacy import classic_devices
from pmapkit.legacy import classic_test_util
from pmapkit.legacy import classic_values as cv
from pmapkit.legacy import pmap_sharding

__all__ = ["INTERNAL", "INDEX_METHODS", "census_records", "REAL_USE", "CONFIG_ATTRS", "ARRAY_METHODS",
           "ARRAY_PROPERTIES", "REFUSED_REAL_USE", "UNSERVABLE", "CONFIG_OPTIONS", "ConfigOption",
           "RemovedConfigValueError", "removed_config_text", "Removed", "RemovedFromJax", "RemovedAttributeError", "RemovedModuleError",
           "NAMES", "MODULES", "PROPERTIES", "SHARDING_PROPERTIES", "REFUSED_NAMES",
           "REFUSED_MODULES",
           "SYSTEMS", "by_name"]


#: ``modern`` of a removed JAX internal.
INTERNAL = "JAX internal; no public replacement"


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
    modern: str        # what to use on JAX 0.10
    example: str       # one line of the modern spelling
    served_by: str = ""   # what pmapkit installs ("" for a refused name)
    make: object = None   # () -> the installed value (None for a refused name)
    # ``pmapkit migrate`` renames the name to ``modern`` when that is a dotted
    # name on this JAX and: True, a drop-in spelling; None, only if it is the
    # very object ``make`` serves; False, never.
    rename: bool | None = None
    # built on the first read (a module __getattr__), not at install: what it
    # needs may be costly to import or absent (absl-py, optax)
    lazy: bool = False
    # read anew at every access (a module __getattr__, never set on the
    # module): ``make()`` is the reader, for a value classic JAX kept current
    # (jaxlib's table of the backends started so far)
    live: bool = False
    # for a refusal: why no faithful equivalent exists (said in the error)
    why: str = ""

    @property
    def removed_in(self):
        """The JAX release without it: derived from the census
        (``removal_release``), never written here."""
        return removal_release(self.name)

    @property
    def attr(self):
        return self.name.rpartition(".")[2]

    @property
    def owner(self):
        return self.name.rpartition(".")[0]

    def error(self, importing=False):
        """The error to raise; ``importing``: the name is being imported
        (``import owner.name``, or ``from owner import name``, where Python
        would turn an AttributeError into its own generic ImportError):
        an ImportError; read as an attribute, a removed module or name is an
        AttributeError, so ``hasattr`` sees it missing."""
        if self.why:
            text = (f"{self.name} was removed in JAX {self.removed_in} and has no "
                    f"faithful equivalent on JAX {jax.__version__}: {self.why}; so "
                    f"pmapkit.legacy does not provide it: use {self.modern} instead"
                    + (f", e.g. {self.example}" if self.example else ""))
        elif self.modern == INTERNAL:
            text = (f"{self.name} was removed in JAX {self.removed_in}. {INTERNAL} "
                    f"on JAX {jax.__version__}, so pmapkit.legacy does not provide it.")
        else:
            text = (f"{self.name} was removed in JAX {self.removed_in} and has no "
                    f"faithful equivalent on JAX {jax.__version__}, so pmapkit.legacy "
                    f"does not provide it: use {self.modern} instead, e.g. {self.example}")
        if importing:
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
    # pickled by reference, as jax.random.shuffle (where it is served)
    shuffle.__module__, shuffle.__qualname__ = "jax.random", "shuffle"
    return shuffle


def _profiler_alias(modern):
    return lambda: getattr(jax.profiler, modern)


def _array_type():
    return jax.Array


def _device_buffers(self):
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


def _local_shards():
    from pmapkit.legacy import global_device_array
    return global_device_array.local_shards


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


def _abstract_arrays_module():
    def missing(attr):
        raise RemovedAttributeError(
            f"jax.abstract_arrays.{attr} was removed with jax.abstract_arrays in JAX "
            f"{removal_release('jax.abstract_arrays')}; pmapkit.legacy serves only "
            "jax.abstract_arrays.ShapedArray (jax.core.ShapedArray). Use jax.core instead.")
    return stand_in_module("jax.abstract_arrays", "jax.abstract_arrays as JAX before "
                           f"{removal_release('jax.abstract_arrays')} had it: ShapedArray "
                           "only.", missing,
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


def _served(name, modern, example, served_by, make):
    return Removed(name, modern, example, served_by, make)


def _refused(name, modern, example):
    return Removed(name, modern, example)


# -- the census -----------------------------------------------------------------
#: ``jax.ops.index_*`` and the ``x.at[idx]`` method each one is now.
INDEX_METHODS = {"index_update": "set", "index_add": "add", "index_mul": "multiply",
                 "index_min": "min", "index_max": "max"}

# Names installed on an existing JAX module (set only where it lacks them).
_TREE = "jax.tree_util.{0}"
NAMES = tuple(
    [Removed(f"jax.{n}", f"jax.tree.{n.removeprefix('tree_')}",
             f"jax.tree.{n.removeprefix('tree_')}(...)  # or jax.tree_util.{n}",
             _TREE.format(n), _tree(n), rename=True)
     for n in ("tree_map", "tree_leaves", "tree_flatten", "tree_unflatten",
               "tree_structure", "tree_transpose")]
    + [Removed("jax.treedef_is_leaf", "jax.tree_util.treedef_is_leaf",
               "jax.tree_util.treedef_is_leaf(treedef)",
               "jax.tree_util.treedef_is_leaf", _tree("treedef_is_leaf")),
       Removed("jax.tree_multimap", "jax.tree.map",
               "jax.tree.map(lambda a, b: a + b, xs, ys)", "jax.tree_util.tree_map",
               _tree("tree_map"), rename=True),
       Removed("jax.tree_util.tree_multimap", "jax.tree.map",
               "jax.tree.map(lambda a, b: a + b, xs, ys)",
               "jax.tree_util.tree_map", _tree("tree_map"), rename=True),
       Removed("jax.ops.index", "plain index expressions with .at[]",
               "x.at[1:3].set(0.0)", "numpy.s_", lambda: np.s_)]
    + [Removed(f"jax.ops.{name}", f"x.at[idx].{method}(y)",
               f"x = x.at[0, 1:].{method}(y)", f"x.at[idx].{method}(y)",
               _index_op(method, name))
       for name, method in INDEX_METHODS.items()]
    + [Removed("jax.numpy.DeviceArray", "jax.Array",
               "isinstance(x, jax.Array)", "jax.Array", _array_type),
       Removed("jax.interpreters.xla.DeviceArray", "jax.Array",
               "isinstance(x, jax.Array)", "jax.Array", _array_type),
       Removed("jax.interpreters.pxla.ShardedDeviceArray", "jax.Array",
               "isinstance(x, jax.Array)", "jax.Array", _array_type),
       Removed("jax.random.KeyArray", "jax.Array",
               "def init(key: jax.Array): ...", "jax.Array", _array_type),
       Removed("jax.random.PRNGKeyArray", "jax.Array",
               "def init(key: jax.Array): ...", "jax.Array", _array_type),
       Removed("jax.random.shuffle",
               "jax.random.permutation(..., independent=True)",
               "jax.random.permutation(key, x, axis=0, independent=True)",
               "jax.random.permutation(key, x, axis, independent=True)", _shuffle),
       Removed("jax.profiler.TraceContext", "jax.profiler.TraceAnnotation",
               "with jax.profiler.TraceAnnotation('name'): ...",
               "jax.profiler.TraceAnnotation", _profiler_alias("TraceAnnotation")),
       Removed("jax.profiler.StepTraceContext", "jax.profiler.StepTraceAnnotation",
               "with jax.profiler.StepTraceAnnotation('train', step_num=i): ...",
               "jax.profiler.StepTraceAnnotation", _profiler_alias("StepTraceAnnotation")),
       Removed("jax.profiler.trace_function", "jax.profiler.annotate_function",
               "f = jax.profiler.annotate_function(f)",
               "jax.profiler.annotate_function", _profiler_alias("annotate_function")),
       Removed("jax.sharding.PmapSharding", "jax.sharding.NamedSharding",
               "NamedSharding(Mesh(devices, ('i',)), P('i'))",
               "pmapkit.legacy.pmap_sharding.PmapSharding (pmap layouts as NamedSharding)",
               lambda: pmap_sharding.PmapSharding),
       Removed("jax.lax.tie_in", "nothing (a no-op since JAX 0.2.0)",
               "y  # instead of lax.tie_in(x, y)", "a no-op returning y", _tie_in)]
    + [_served(n, modern, example, by, make) for n, modern, example, by, make in (
        ("jax.experimental.enable_x64", "jax.enable_x64",
         "with jax.enable_x64(True): ...", "jax.enable_x64(new_val)", cv.enable_x64),
        ("jax.experimental.disable_x64", "jax.enable_x64(False)",
         "with jax.enable_x64(False): ...", "jax.enable_x64(False)", cv.disable_x64),
        ("jax.sharding.PositionalSharding", "jax.sharding.NamedSharding",
         "NamedSharding(jax.make_mesh((4, 2), ('x', 'y')), P('x', 'y'))",
         "pmapkit.legacy.positional_sharding.PositionalSharding (a NamedSharding)",
         cv.positional_sharding),
        ("jax.sharding.use_mesh", "jax.set_mesh", "with jax.set_mesh(mesh): ...",
         "jax.set_mesh(mesh) as a context", cv.use_mesh),
        ("jax.experimental.compilation_cache.compilation_cache.initialize_cache",
         "jax.config.update('jax_compilation_cache_dir', path)",
         "jax.config.update('jax_compilation_cache_dir', '/tmp/jax_cache')",
         "jax_compilation_cache_dir set", cv.initialize_cache),
        ("jax.experimental.compilation_cache.compilation_cache.is_initialized",
         "jax.config.jax_enable_compilation_cache", "jax.config.jax_enable_compilation_cache",
         "jax.config.jax_enable_compilation_cache", cv.is_initialized),
        ("jax.numpy.row_stack", "jax.numpy.vstack", "jnp.vstack([a, b])", "jax.numpy.vstack",
         cv.jnp_alias("vstack")),
        ("jax.numpy.in1d", "jax.numpy.isin", "jnp.isin(jnp.ravel(a), b)",
         "jnp.isin(jnp.ravel(ar1), ar2, invert=invert)", cv.in1d),
        ("jax.numpy.trapz", "jax.numpy.trapezoid", "jnp.trapezoid(y, x)",
         "jax.numpy.trapezoid", cv.jnp_alias("trapezoid")),
        ("jax.numpy.round_", "jax.numpy.round", "jnp.round(x, 2)", "jax.numpy.round",
         cv.jnp_alias("round")),
        ("jax.numpy.NINF", "-jax.numpy.inf", "-jnp.inf", "-inf", cv.constant(float("-inf"))),
        ("jax.numpy.PZERO", "0.0", "0.0", "0.0", cv.constant(0.0)),
        ("jax.numpy.NZERO", "-0.0", "-0.0", "-0.0", cv.constant(-0.0)),
        ("jax.random.threefry_2x32", "jax.extend.random.threefry_2x32",
         "jax.extend.random.threefry_2x32(keypair, count)",
         "jax.extend.random.threefry_2x32 (the same function)",
         cv.extend_random("threefry_2x32")),
        ("jax.random.threefry2x32_p", "jax.extend.random.threefry2x32_p",
         "from jax.extend.random import threefry2x32_p",
         "jax.extend.random.threefry2x32_p (the same primitive)",
         cv.extend_random("threefry2x32_p")),
        ("jax.random.default_prng_impl", "jax.config.jax_default_prng_impl",
         "jax.random.key(0)  # the default implementation",
         "the jax.extend.random implementation jax_default_prng_impl names",
         cv.default_prng_impl),
        ("jax.random.threefry2x32_key", "jax.random.key(seed, impl='threefry2x32')",
         "jax.random.key(0, impl='threefry2x32')", "jax.random.key(seed, impl=...)",
         cv.key_constructor("threefry2x32", "threefry2x32_key")),
        ("jax.random.rbg_key", "jax.random.key(seed, impl='rbg')",
         "jax.random.key(0, impl='rbg')", "jax.random.key(seed, impl=...)",
         cv.key_constructor("rbg", "rbg_key")),
        ("jax.random.unsafe_rbg_key", "jax.random.key(seed, impl='unsafe_rbg')",
         "jax.random.key(0, impl='unsafe_rbg')", "jax.random.key(seed, impl=...)",
         cv.key_constructor("unsafe_rbg", "unsafe_rbg_key")),
        ("jax.nn.normalize", "jax.nn.standardize", "jax.nn.standardize(x, axis=-1)",
         "jax.nn.standardize", cv.standardize),
        ("jax.scipy.linalg.tril", "jax.numpy.tril", "jnp.tril(m, k)", "jnp.tril(m, k)",
         cv.triangle("tril")),
        ("jax.scipy.linalg.triu", "jax.numpy.triu", "jnp.triu(m, k)", "jnp.triu(m, k)",
         cv.triangle("triu")),
        ("jax.tree_util.build_tree", "treedef.from_iterable_tree",
         "treedef.from_iterable_tree(xs)", "treedef.from_iterable_tree(xs)", cv.build_tree),
        ("jax.tree_util.AttributeKeyPathEntry", "jax.tree_util.GetAttrKey",
         "jax.tree_util.GetAttrKey('name')", "a NamedTuple(key) printing as .key",
         cv.keypath_entry("AttributeKeyPathEntry")),
        ("jax.tree_util.GetitemKeyPathEntry", "jax.tree_util.SequenceKey / DictKey",
         "jax.tree_util.SequenceKey(0)", "a NamedTuple(key) printing as [key]",
         cv.keypath_entry("GetitemKeyPathEntry")),
        ("jax.clear_backends", "jax.extend.backend.clear_backends",
         "jax.extend.backend.clear_backends()", "jax.extend.backend.clear_backends",
         cv.clear_backends),
        ("jax.lib.xla_client", "jaxlib.xla_client (internal)", "from jaxlib import xla_client",
         "jaxlib.xla_client", cv.xla_client),
        ("jax.partial", "functools.partial", "functools.partial(f, x)",
         "functools.partial", cv.functools_partial),
        ("jax.lax.zeros_like_array", "jax.numpy.zeros_like", "jnp.zeros_like(x)",
         "lax.full_like(x, 0)", cv.zeros_like_array),
        ("jax.example_libraries.stax.normalize", "jax.nn.standardize",
         "jax.nn.standardize(x, axis=-1)", "jax.nn.standardize", cv.standardize),
    )]
    # classic modules re-exported jax.tree_util's functions: the same objects
    + [_served(f"{owner}.{attr}", f"jax.tree_util.{attr}", f"jax.tree_util.{attr}(...)",
               f"jax.tree_util.{attr} (the same object)", _tree(attr))
       for owner, attrs in (
           ("jax.example_libraries.optimizers",
            ("tree_map", "tree_flatten", "tree_unflatten", "register_pytree_node")),
           ("jax.experimental.multihost_utils", ("tree_map",)))
       for attr in attrs])


# -- what real code reached (issue 48: census.real_use(), two or more
# repositories) that the release census served wrongly or not at all --------
def _same(owner_attr, module, attr=None, note=""):
    """A classic internal served as the object JAX 0.10 holds in ``module``."""
    attr = attr or owner_attr.rpartition(".")[2]
    return Removed(owner_attr, INTERNAL, "", f"{module}.{attr} (the same object{note})",
                   cv.private_object(module, attr))


def _test_util_record(attr, make=None):
    return Removed(f"jax.test_util.{attr}", "absl's parameterized.TestCase and numpy.testing",
                   "np.testing.assert_allclose(x, y)",
                   f"jax._src.test_util.{attr} (the same object; needs absl-py)"
                   if make is None else make[0],
                   make[1] if make else classic_test_util.same_object(attr), lazy=True)


REAL_USE = (
    Removed("jax.ShapedArray", "jax.core.ShapedArray",
            "jax.core.ShapedArray((2, 3), jnp.float32)", "jax.core.ShapedArray (the same class)",
            lambda: jax.core.ShapedArray, rename=True),
    Removed("jax.xla", "jax.interpreters.xla", "from jax.interpreters import xla",
            "the module jax.interpreters.xla (classic jax re-exported it)",
            cv.public_module("jax.interpreters.xla"), rename=True, lazy=True),
    Removed("jax.pxla", "jax.interpreters.pxla", "from jax.interpreters import pxla",
            "the module jax.interpreters.pxla (classic jax re-exported it)",
            cv.public_module("jax.interpreters.pxla"), rename=True, lazy=True),
    Removed("jax.ad.deflinear", "jax.interpreters.ad.deflinear",
            "jax.interpreters.ad.deflinear(prim, transpose_rule)",
            "jax.interpreters.ad.deflinear (classic jax.ad was jax.interpreters.ad)",
            cv.private_object("jax._src.interpreters.ad", "deflinear"), rename=True),
    Removed("jax.numpy.alltrue", "jax.numpy.all", "jnp.all(x)", "jax.numpy.all",
            cv.jnp_alias("all"), rename=True),
    Removed("jax.numpy.product", "jax.numpy.prod", "jnp.prod(x)", "jax.numpy.prod",
            cv.jnp_alias("prod"), rename=True),
    Removed("jax.interpreters.xla._DeviceArray", "jax.Array", "isinstance(x, jax.Array)",
            "jax.Array", _array_type),
    Removed("jax.interpreters.xla.Device", "jax.Device", "isinstance(d, jax.Device)",
            "jax.Device (the one device class)", lambda: jax.Device, rename=True),
    Removed("jax.lib.xla_client.Device", "jax.Device", "isinstance(d, jax.Device)",
            "jax.Device (the one device class)", lambda: jax.Device, rename=True),
    Removed("jax.lib.xla_client._local_backends", "jax.extend.backend.get_backend()",
            "jax.extend.backend.get_backend('cpu')",
            "the backends started so far by platform, None before the first "
            "(read at each access; chex.set_n_cpu_devices asks it)",
            lambda: cv.started_backends, live=True),
    Removed("jax.interpreters.xla.abstractify", "jax.typeof", "jax.typeof(x)",
            "the abstract value of an argument (JAX's shaped_abstractify)",
            lambda: jp.shaped_abstractify),
    Removed("jax.interpreters.xla.xb", "jax.extend.backend", "jax.extend.backend.get_backend()",
            "the module jax.lib.xla_bridge (as classic xla imported it)",
            cv.public_module("jax.lib.xla_bridge"), lazy=True),
    Removed("jax.core.get_aval", "jax.typeof", "jax.typeof(x)",
            "jax.typeof (a concrete value gives its ShapedArray: ConcreteArray went in "
            "JAX 0.4.36)", cv.get_aval(), rename=True),
    Removed("jax._src.core.get_aval", "jax.typeof", "jax.typeof(x)",
            "jax.typeof (a concrete value gives its ShapedArray: ConcreteArray went in "
            "JAX 0.4.36)", cv.get_aval(), rename=True),
    # flax 0.3.6 (2021-12) imports it in flax.linen.module: every flax user of
    # that release reaches it, one repository in the census.
    Removed("jax._src.numpy.lax_numpy.isin", "jax.numpy.isin", "jnp.isin(x, test_elements)",
            "jax.numpy.isin (the same function; JAX moved it out of lax_numpy)",
            lambda: jnp.isin, rename=True),
    Removed("jax.core.ConcretizationTypeError", "jax.errors.ConcretizationTypeError",
            "except jax.errors.ConcretizationTypeError: ...",
            "jax.errors.ConcretizationTypeError (the same class)",
            lambda: jax.errors.ConcretizationTypeError, rename=True),
    Removed("jax.core.symbolic_equal_dim", INTERNAL, "",
            "jax._src.core.definitely_equal (the same function, renamed)",
            cv.symbolic_equal_dim()),
    _same("jax.core.Shape", "jax._src.core"),
    _same("jax.interpreters.batching.BatchTracer", "jax._src.interpreters.batching"),
    _same("jax.interpreters.batching.BatchTrace", "jax._src.interpreters.batching",
          note="; its constructor is the stackless one of JAX 0.4.36+"),
    Removed("jax.interpreters.batching.not_mapped", INTERNAL, "", "None (as classic batching)",
            cv.not_mapped()),
    _same("jax.interpreters.ad.call_transpose", "jax._src.interpreters.ad"),
    Removed("jax.interpreters.pxla.spec_to_indices", INTERNAL, "",
            "pmapkit.sharding_specs.spec_to_indices (classic ShardingSpec)",
            lambda: __import__("pmapkit.sharding_specs",
                               fromlist=["spec_to_indices"]).spec_to_indices),
    Removed("jax.experimental.pjit.ParsedPartitionSpec", INTERNAL, "",
            "pmapkit.sharding_specs.ParsedPartitionSpec (classic pjit's)",
            lambda: __import__("pmapkit.sharding_specs",
                               fromlist=["ParsedPartitionSpec"]).ParsedPartitionSpec),
    Removed("jax.experimental.pjit.get_array_mapping", INTERNAL, "",
            "pmapkit.sharding_specs.array_mapping (classic pjit's)",
            lambda: __import__("pmapkit.sharding_specs",
                               fromlist=["array_mapping"]).array_mapping),
    Removed("jax._src.tree_util._replace_nones", INTERNAL, "",
            "a tree_map replacing None (classic semantics)", cv.replace_nones),
    Removed("jax._src.lib.xla_bridge", "jax.extend.backend", "jax.extend.backend.get_backend()",
            "jax._src.xla_bridge (the same module, moved)",
            cv.private_module("jax._src.xla_bridge"), lazy=True),
    _test_util_record("JaxTestCase", ("a subclass of jax._src.test_util.JaxTestCase with "
                                      "the classic defaults (needs absl-py)",
                                      classic_test_util.jax_test_case)),
    _test_util_record("cases_from_list", ("the classic sampling (JAX_NUM_GENERATED_CASES "
                                          "of the list, seed 42)",
                                          classic_test_util.cases_from_list)),
) + tuple(_test_util_record(attr) for attr in classic_test_util.SAME_OBJECTS)

# Attributes of JAX's config object (``jax.config.NAME``).
CONFIG_ATTRS = (
    Removed("jax.config.FLAGS", "jax.config.read / jax.config.NAME",
            "jax.config.jax_enable_x64", "a namespace over the config values (reads "
            "and updates)", classic_config.flags),
    Removed("jax.config.enable_omnistaging", "nothing (omnistaging is always on)",
            "# drop the jax.config.enable_omnistaging() line", "a no-op that warns",
            classic_config.enable_omnistaging),
    Removed("jax.config.omnistaging_enabled", "nothing (omnistaging is always on)",
            "True", "True", classic_config.omnistaging_enabled),
)

# Methods installed on JAX's array type (classic DeviceArray's).
ARRAY_METHODS = (
    Removed("jax.Array.to_py", "numpy.asarray(x)", "np.asarray(x)",
            "the value as a NumPy array", lambda: cv.to_py),
)
def _sharding_spec(self):
    try:
        return cv.sharding_spec(self)
    except AttributeError as e:
        raise RemovedAttributeError(
            f"jax.Array.sharding_spec was removed in JAX "
            f"{removal_release('jax.Array.sharding_spec')} with ShardedDeviceArray "
            f"({e}): use x.sharding instead") from None


ARRAY_PROPERTIES = (
    Removed("jax.Array.sharding_spec", "x.sharding", "x.sharding",
            "the layout as a classic ShardingSpec (pmapkit.sharding_specs)",
            lambda: _sharding_spec),
)
# Classic ``x.device()`` (a method until JAX 0.4.26; a property since 0.4.31)
# cannot be served: the call reaches the Device itself, and a callable Device
# is read as a function by JAX's and pmapkit's own code (cache keys take weak
# references of callables). Refused, with its reason, where it can be seen:
# ``pmapkit migrate`` and its leftover scan, the report's table, the docs.
UNSERVABLE = (
    Removed("jax.Array.device", "x.device (no call)", "x.device",
            why="x.device is a property that gives the Device, and making every Device "
                "callable would make JAX's own code take devices for functions"),
)


def _gone(name, why, modern, example=""):
    return Removed(name, modern, example, why=why)


_STACKLESS = ("JAX's tracing is stackless since 0.4.36: no main traces, sublevels "
              "or trace stack exist")
_MLIR_ONLY = ("JAX lowers to StableHLO through MLIR only: XLA-builder translation "
              "rules and ops have no equivalent")
_MLIR_RULE = "jax.interpreters.mlir.register_lowering(prim, mlir.lower_fun(impl))"
_NO_BUILDER = "jaxlib no longer has the XLA builder (xla_client.ops, XlaBuilder)"

# Names real code reached (two or more repositories) that JAX 0.10 holds
# nowhere, each refused with the reason no faithful equivalent exists.
REFUSED_REAL_USE = (
    _gone("jax.core.as_named_shape", "named shapes left JAX's avals in 0.4.31",
          "jax.core.ShapedArray(shape, dtype)"),
    _gone("jax.core.cur_sublevel", _STACKLESS, "jax.make_jaxpr / primitives with rules"),
    _gone("jax.core.new_main", _STACKLESS, "jax.make_jaxpr / primitives with rules"),
    _gone("jax.core.thread_local_state", _STACKLESS, "jax.make_jaxpr / primitives with rules"),
    _gone("jax.core.extract_call_jaxpr", "call primitives carry their jaxpr in their "
          "params", "eqn.params['jaxpr']"),
    _gone("jax.interpreters.partial_eval.trace_to_jaxpr", _STACKLESS, "jax.make_jaxpr",
          "jax.make_jaxpr(f)(*args)"),
    _gone("jax.interpreters.partial_eval.trace_to_jaxpr_final", _STACKLESS, "jax.make_jaxpr",
          "jax.make_jaxpr(f)(*args)"),
    _gone("jax.interpreters.xla.xla_call_p", "jax.jit binds the pjit primitive: there "
          "is no xla_call", "jax.jit", "jax.jit(f)"),
) + tuple(_gone(f"jax.interpreters.xla.{n}", _MLIR_ONLY, "jax.interpreters.mlir",
                _MLIR_RULE)
          for n in ("call_translations", "jaxpr_subcomp", "register_translation",
                    "translations", "lower_fun", "xops", "AxisEnv")) + (
    _gone("jax.lib.xla_client.ops", _NO_BUILDER, "jax.interpreters.mlir", _MLIR_RULE),
    _gone("jax.lib.xla_client.make_gpu_client", "jaxlib makes its clients through "
          "PJRT plugins", "jax.devices('gpu')"),
    _gone("jax.lib.xla_bridge.make_computation_builder", _NO_BUILDER,
          "jax.interpreters.mlir", _MLIR_RULE),
    _gone("jax.lib.xla_bridge.parameter", _NO_BUILDER, "jax.interpreters.mlir", _MLIR_RULE),
    _gone("jax.experimental.pjit._prepare_axis_resources", "an internal of classic "
          "pjit's argument parsing; pmapkit's pjit parses the classic arguments itself",
          "jax.sharding.PartitionSpec"),
    _gone("jax.experimental.maps._PositionalSemantics", "the local/global positional "
          "semantics went with the GlobalDeviceArray: every jax.Array is global",
          "jax.make_array_from_process_local_data"),
    _gone("jax.util.extend_name_stack", "name stacks are source_info_util's since JAX "
          "0.2", "jax.named_scope", "with jax.named_scope('name'): ..."),
    _gone("jax.defvjp_all", "custom differentiation rules are custom_vjp's since JAX "
          "0.2", "jax.custom_vjp", "f = jax.custom_vjp(f); f.defvjp(fwd, bwd)"),
)

# Properties installed on JAX's array type.
PROPERTIES = (
    Removed("jax.Array.device_buffers", "x.addressable_shards",
            "[s.data for s in x.addressable_shards]",
            "[s.data for s in x.addressable_shards]",
            lambda: _device_buffers),
    Removed("jax.Array.local_shards", "x.addressable_shards", "x.addressable_shards",
            "x.addressable_shards", lambda: _local_shards()),
    Removed("jax.Array.device_buffer", "x.addressable_data(0)",
            "x.addressable_data(0)", "the one addressable shard's data",
            lambda: _device_buffer),
)

# Properties installed on JAX's NamedSharding (pmap layouts only).
SHARDING_PROPERTIES = (
    Removed("jax.sharding.PmapSharding.devices", "sharding.mesh.devices",
            "list(x.sharding.mesh.devices.flat)", "the pmap layout's mesh devices",
            lambda: pmap_sharding.pmap_devices),
)

# Modules served by pmapkit.legacy's finder (jax.config: see _installer.py).
MODULES = (
    Removed("jax.experimental.optimizers", "jax.example_libraries.optimizers",
            "from jax.example_libraries import optimizers",
            "jax.example_libraries.optimizers", _import("jax.example_libraries.optimizers")),
    Removed("jax.experimental.stax", "jax.example_libraries.stax",
            "from jax.example_libraries import stax",
            "jax.example_libraries.stax", _import("jax.example_libraries.stax")),
    Removed("jax.config", "the jax.config attribute",
            "import jax; jax.config.update('jax_enable_x64', True)",
            "a module whose config is jax.config", _config_module),
    Removed("jax.abstract_arrays", "jax.core.ShapedArray",
            "jax.core.ShapedArray((2, 3), jnp.float32)",
            "a module with ShapedArray = jax.core.ShapedArray", _abstract_arrays_module),
    Removed("jax.api", "the jax package", "from jax import jit, grad, vmap",
            "a module forwarding to jax's public names", _api_module),
    _served("jax.lib.xla_bridge", "jax.extend.backend",
            "jax.extend.backend.get_backend(); jax.default_backend()",
            "a module of jax.extend.backend's functions", cv.xla_bridge_module),
    _served("jax.experimental.global_device_array",
            "jax.Array with jax.make_array_from_callback",
            "jax.make_array_from_callback(shape, NamedSharding(mesh, P('x')), "
            "lambda idx: data[idx])",
            "pmapkit.legacy.global_device_array (GDAs are jax.Arrays)",
            _import("pmapkit.legacy.global_device_array")),
    _served("jax.interpreters.sharded_jit", "jax.jit with in_shardings/out_shardings",
            "jax.jit(f, in_shardings=NamedSharding(mesh, P('x')))",
            "pmapkit.legacy.sharded_jit (pjit over a mesh of the partitions)",
            _import("pmapkit.legacy.sharded_jit")),
    _served("jax.linear_util", "jax.extend.linear_util",
            "from jax.extend import linear_util as lu",
            "a module of jax.extend.linear_util's objects (the same ones)",
            cv.linear_util_module),
    _served("jax.util", INTERNAL,
            "", "a module of the helpers JAX "
            "still has (jax._src.util: the same objects)", cv.util_module),
    _served("jax.experimental.x64_context", "jax.enable_x64",
            "with jax.enable_x64(True): ...", "a module with enable_x64/disable_x64",
            cv.x64_context_module),
    _served("jax.experimental.optix", "the optax package",
            "import optax; opt = optax.adam(1e-3)",
            "optax's functions under optix's names (needs optax)", lambda: _optix_module()),
    _served("jax.prng", "jax.random.key(seed, impl=...)",
            "jax.random.key(0, impl='threefry2x32')",
            "a module with seed_with_impl and jax.extend.random's implementations",
            cv.prng_module),
    _served("jax.numpy.lax_numpy", "jax.numpy", "import jax.numpy as jnp",
            "jax._src.numpy.lax_numpy (the same module)",
            cv.private_module("jax._src.numpy.lax_numpy")),
    _served("jaxlib.xla_extension", "jax.Device / jax.Array",
            "isinstance(d, jax.Device) and d.platform == 'cpu'",
            "jaxlib._jax's objects with per-platform device classes (isinstance by "
            "platform)", lambda: classic_devices.xla_extension_module("jaxlib.xla_extension")),
    _served("jax.lib.xla_extension", "jax.Device / jax.Array",
            "isinstance(d, jax.Device) and d.platform == 'cpu'",
            "jaxlib._jax's objects with per-platform device classes (isinstance by "
            "platform)", lambda: classic_devices.xla_extension_module("jax.lib.xla_extension")),
    _served("jax.extend.ffi", "jax.ffi", "jax.ffi.ffi_call(...)",
            "a module of jax.ffi's functions (the same objects)", cv.extend_ffi_module),
)

# Names that get a clear error where they are touched.
REFUSED_NAMES = (
    Removed("jax.experimental.maps.xmap", "jax.shard_map",
            "jax.shard_map(f, mesh=mesh, in_specs=P('x'), out_specs=P('x'))"),
    Removed("jax.experimental.maps.serial_loop", "jax.lax.scan / jax.lax.map",
            "jax.lax.map(f, xs, batch_size=8)"),
    Removed("jax.experimental.maps.SerialLoop", "jax.lax.scan / jax.lax.map",
            "jax.lax.map(f, xs, batch_size=8)"),
    Removed("jax.xla_computation", "the AOT API",
            "jax.jit(f).lower(*args).as_text()"),
    Removed("jax.soft_pmap", "jax.vmap, or jax.shard_map over a mesh",
            "jax.shard_map(f, mesh=mesh, in_specs=P('i'), out_specs=P('i'))"),
    Removed("jax.custom_transforms", "jax.custom_jvp / jax.custom_vjp",
            "f = jax.custom_jvp(f); f.defjvp(f_jvp)"),
    Removed("jax.interpreters.pxla.make_sharded_device_array",
            "jax.make_array_from_single_device_arrays",
            "jax.make_array_from_single_device_arrays(shape, sharding, arrays)"),
) + tuple(_refused(*r) for r in (
    ("jax.sharding.GSPMDSharding", "jax.sharding.NamedSharding",
     "NamedSharding(mesh, P('x'))"),
    ("jax.sharding.XLACompatibleSharding", "jax.sharding.Sharding",
     "isinstance(s, jax.sharding.Sharding)"),
    ("jax.tree_util.register_keypaths", "jax.tree_util.register_pytree_with_keys",
     "jax.tree_util.register_pytree_with_keys(T, flatten_with_keys, unflatten)"),
    ("jax.dlpack.to_dlpack", "the array itself (jax.Array implements __dlpack__)",
     "torch.utils.dlpack.from_dlpack(x)  # or np.from_dlpack(x)"),
    ("jax.dlpack.SUPPORTED_DTYPES", "jax.dlpack.is_supported_dtype",
     "jax.dlpack.is_supported_dtype(x.dtype)"),
    ("jax.errors.SimplifiedTraceback", "nothing: JAX filters tracebacks itself "
     "(jax_traceback_filtering)", "jax.config.update('jax_traceback_filtering', 'off')"),
    ("jax.stages.OutInfo", "jax.ShapeDtypeStruct",
     "jax.ShapeDtypeStruct(shape, dtype, sharding=s)"),
    ("jax.lax.infeed", "jax.experimental.io_callback",
     "jax.experimental.io_callback(read_host, jax.ShapeDtypeStruct(shape, dtype))"),
    ("jax.lax.outfeed", "jax.experimental.io_callback / jax.debug.callback",
     "jax.debug.callback(write_host, x)"),
    ("jax.lax.pdot", "jnp.dot under jax.shard_map, then jax.lax.psum",
     "jax.lax.psum(jnp.dot(x, y), 'i')  # inside jax.shard_map"),
    ("jax.lax.xeinsum", "jnp.einsum under jax.shard_map, then jax.lax.psum",
     "jax.lax.psum(jnp.einsum('ij,jk->ik', x, y), 'i')  # inside jax.shard_map"),
    ("jax.lax.all_gather_start", "jax.lax.all_gather", "jax.lax.all_gather(x, 'i')"),
    ("jax.lax.all_gather_done", "jax.lax.all_gather", "jax.lax.all_gather(x, 'i')"),
    ("jax.spmd_mode", "nothing: every jax.Array is global; remove the context",
     "f(x)  # instead of: with jax.spmd_mode('allow_all'): f(x)"),
    ("jax.numpy.issubsctype", "jax.numpy.issubdtype", "jnp.issubdtype(x.dtype, jnp.floating)"),
    ("jax.scipy.special.sph_harm", "jax.scipy.special.sph_harm_y (n, m, theta, phi order)",
     "jax.scipy.special.sph_harm_y(n, m, theta, phi)"),
    ("jax.experimental.MutableArray", "jax.Ref", "r = jax.new_ref(jnp.zeros(3))"),
    ("jax.experimental.mutable_array", "jax.new_ref", "r = jax.new_ref(jnp.zeros(3))"),
    ("jax.numpy.fix", "jax.numpy.trunc", "jnp.trunc(x)"),
    ("jax.lax.pvary", "jax.lax.pcast(x, axis_name, to='varying')",
     "jax.lax.pcast(x, 'i', to='varying')"),
    ("jax.lax.all_gather_invariant", "jax.lax.all_gather", "jax.lax.all_gather(x, 'i')"),
    ("jax.experimental.multihost_utils.pjit", "jax.jit with in_shardings/out_shardings",
     "jax.jit(f, out_shardings=NamedSharding(mesh, P()))"),
    ("jax.extend.backend.add_clear_backends_callback", "nothing public: "
     "jax.extend.backend.clear_backends() clears JAX's caches itself",
     "jax.extend.backend.clear_backends()"),
))

REFUSED_MODULES = (
    Removed("jax.experimental.gda_serialization", "orbax-checkpoint, or "
            "jax.experimental.array_serialization.serialization",
            "orbax.checkpoint.PyTreeCheckpointer().save(path, tree)",
            why="it became jax.experimental.array_serialization, whose functions take "
                "other arguments (a sharding, not a mesh and mesh axes) and write "
                "another format"),
    Removed("jax.experimental.loops", "jax.lax.fori_loop / jax.lax.scan",
            "jax.lax.fori_loop(0, n, body, init)"),
    Removed("jax.experimental.sharded_jit", "jax.jit with in_shardings",
            "jax.jit(f, in_shardings=NamedSharding(mesh, P('x')))"),
)

# The classic systems pmapkit itself provides (for the report only).
SYSTEMS = (
    Removed("jax.experimental.pjit.pjit",
            "jax.jit with in_shardings/out_shardings (in_axis_resources -> in_shardings, "
            "out_axis_resources -> out_shardings)",
            "jax.jit(f, in_shardings=NamedSharding(mesh, P('x')))", "pmapkit.pjit"),
    Removed("jax.experimental.pjit.with_sharding_constraint",
            "jax.lax.with_sharding_constraint",
            "jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P('x')))",
            "pmapkit.with_sharding_constraint"),
    Removed("jax.experimental.maps", "jax.sharding.Mesh + jax.set_mesh",
            "with jax.set_mesh(jax.sharding.Mesh(devs, ('x',))): ...", "pmapkit.pjit.maps"),
    Removed("jax.experimental.host_callback", "jax.debug.callback / "
            "jax.experimental.io_callback", "jax.debug.callback(print, x)",
            "pmapkit.host_callback"),
    Removed("jax.experimental.jax2tf.jax_export", "jax.export",
            "jax.export.export(jax.jit(f))(*specs)", "pmapkit.export"),
    Removed("jax.experimental.export", "jax.export",
            "jax.export.export(jax.jit(f))(*specs)", "pmapkit.export"),
    Removed("jax.device_put_replicated", "jax.device_put",
            "jax.device_put(x, NamedSharding(mesh, P()))", "pmapkit.device_put_replicated"),
    Removed("jax.device_put_sharded", "jax.device_put",
            "jax.device_put(stacked, NamedSharding(mesh, P('x')))",
            "pmapkit.device_put_sharded"),
    Removed("jax.experimental.pjit.PartitionSpec", "jax.sharding.PartitionSpec",
            "from jax.sharding import PartitionSpec as P", "jax.sharding.PartitionSpec"),
    Removed("jax.experimental.PartitionSpec", "jax.sharding.PartitionSpec",
            "from jax.sharding import PartitionSpec as P", "jax.sharding.PartitionSpec"),
    Removed("jax.experimental.host_callback.call",
            "jax.pure_callback (returns values; NOT jax.debug.callback)",
            "y = jax.pure_callback(f, jax.ShapeDtypeStruct(x.shape, x.dtype), x)",
            "pmapkit.host_callback.call"),
    Removed("jax.experimental.host_callback.id_tap", "jax.debug.callback",
            "jax.debug.callback(tap, x)  # returns nothing: keep using x",
            "pmapkit.host_callback.id_tap"),
    Removed("jax.experimental.host_callback.id_print", "jax.debug.print",
            "jax.debug.print('x = {}', x)", "pmapkit.host_callback.id_print"),
    Removed("jax.experimental.host_callback.barrier_wait",
            "jax.effects_barrier", "jax.effects_barrier()",
            "pmapkit.host_callback.barrier_wait"),
    Removed("jax.experimental.jax2tf.jax_export.call_exported",
            "Exported.call", "exp.call(*args)", "pmapkit.export.call_exported"),
    Removed("jax.experimental.jax2tf.jax_export.serialize",
            "Exported.serialize", "blob = exp.serialize()", "pmapkit.export.serialize"),
    Removed("jax.experimental.jax2tf.jax_export.export",
            "jax.export.export (lowering_platforms= is platforms=)",
            "jax.export.export(jax.jit(f), platforms=['cpu'])(*specs)",
            "pmapkit.export.export"),
    Removed("jax.experimental.export.call_exported", "Exported.call",
            "exp.call(*args)", "pmapkit.export.call_exported"),
    Removed("jax.experimental.export.serialize", "Exported.serialize",
            "blob = exp.serialize()", "pmapkit.export.serialize"),
    Removed("jax.experimental.export.export",
            "jax.export.export (lowering_platforms= is platforms=)",
            "jax.export.export(jax.jit(f), platforms=['cpu'])(*specs)",
            "pmapkit.export.export"),
    Removed("jax.pmap", "jax.shard_map under jax.jit",
            "jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P('i'), out_specs=P('i')))",
            "pmapkit.pmap"),
)

@dataclasses.dataclass(frozen=True)
class ConfigOption:
    """A ``jax_*`` config option JAX removed whose every accepted value asks
    for what JAX 0.10 always does: served as an option of JAX's config that
    changes nothing; a value that asks for the removed behaviour raises."""
    name: str
    default: bool
    accepted: tuple      # the values that describe JAX 0.10's behaviour
    why: str             # why those values change nothing today

    @property
    def removed_in(self):
        return census.config_removed_in(self.name) or census.TARGET_RELEASE

    def check(self, value):
        if bool(value) not in self.accepted:
            raise RemovedConfigValueError(
                f"{self.name}={bool(value)} was removed in JAX {self.removed_in}: "
                f"{self.why}; pmapkit.legacy accepts only "
                f"{' or '.join(map(str, self.accepted))}. Use the default instead, "
                f"e.g. drop the jax.config.update('{self.name}', ...) line")


class RemovedConfigValueError(RemovedFromJax, ValueError):
    """A removed config option set to the behaviour JAX no longer has."""


CONFIG_OPTIONS = (
    ConfigOption("jax_parallel_functions_output_gda", False, (True, False),
                 "pjit's outputs were GlobalDeviceArrays (True) or ShardedDeviceArrays; "
                 "every output is now a jax.Array, which serves both APIs"),
    ConfigOption("jax_array", True, (True,),
                 "every value is a jax.Array; DeviceArray/ShardedDeviceArray/GDA are gone"),
    ConfigOption("jax_jit_pjit_api_merge", True, (True,),
                 "jax.jit and pjit are one API"),
    ConfigOption("jax_omnistaging", True, (True,),
                 "JAX stages every operation under jit"),
    ConfigOption("jax_enable_mlir", True, (True,), "JAX lowers through MLIR only"),
    ConfigOption("jax_coordination_service", True, (True,),
                 "the coordination service is the only one jax.distributed has"),
    ConfigOption("jax_dynamic_shapes", False, (False,),
                 "JAX traces static shapes only: the dynamic-shapes prototype is gone"),
    ConfigOption("experimental_xmap_spmd_lowering", False, (False,),
                 "xmap is gone, and with it its SPMD lowering"),
)


def removed_config_text(option):
    """The error for ``jax.config.update(option, ...)`` of a removed option
    pmapkit.legacy does not serve, or None for one the census never saw."""
    removed = census.config_removed_in(option)
    if removed is None:
        return None
    return (f"{option} was removed in JAX {removed} and has no faithful equivalent on "
            f"JAX {jax.__version__}, so pmapkit.legacy does not provide it: use "
            f"nothing instead (drop the jax.config.update('{option}', ...) line)")


# Where the census's fact is not the one a record states, the record's own
# release with the reason (tests/test_legacy_census.py holds each against the
# census: a name the census never saw, or a fact about another thing).
OVERRIDES = {
    "jax.pmap": ("0.10.0 (the C++ pmap)",
                 "jax.pmap still exists; 0.10 removed the C++ pmap it was"),
    "jax.experimental.pjit.pjit": ("0.4.14 (in_axis_resources)",
                                   "the name stays; its in_axis_resources went"),
    "jax.Array.device_buffers": ("0.4.27", "a property, not a module name"),
    "jax.Array.device_buffer": ("0.4.27", "a property, not a module name"),
    "jax.Array.local_shards": ("0.4.7", "GlobalDeviceArray's property; jax.Array took "
                               "the GDA's place"),
    "jax.sharding.PmapSharding.devices": ("0.10.0", "a property of a removed class"),
    # what real code reached (issue 48), removals the release notes date
    "jax.Array.to_py": ("0.4.9", "DeviceArray's method, kept on jax.Array until then"),
    "jax.Array.sharding_spec": ("0.4.14", "ShardedDeviceArray's property"),
    "jax.Array.device": ("0.4.31", "a method until then; a property since"),
    "jax.config.enable_omnistaging": ("0.3.15", "a method of the config object"),
    "jax.config.omnistaging_enabled": ("0.3.15", "an attribute of the config object"),
    "jax.device_put_replicated": ("0.10.0", "probed: deprecated names answered until 0.10"),
    "jax.device_put_sharded": ("0.10.0", "probed: deprecated names answered until 0.10"),
    # modules JAX 0.10 still answers for (an empty or deprecated module)
    "jax.experimental.export": ("0.4.36", "0.10 keeps the package; its functions went"),
    "jax.experimental.export.call_exported": ("0.4.36", "as the module above"),
    "jax.experimental.export.serialize": ("0.4.36", "as the module above"),
    "jax.experimental.export.export": ("0.4.36", "as the module above"),
    "jax.experimental.jax2tf.jax_export": ("0.4.22", "jax2tf needs TensorFlow: not probed"),
    "jax.experimental.jax2tf.jax_export.serialize": ("0.4.22", "as the module above"),
}
# The release notes name the very release inside a census window (releases
# between the read or installable ones): each must lie in its window.
_NARROWED = {
    "jax.tree_multimap": "0.3.16", "jax.tree_util.tree_multimap": "0.3.16",
    "jax.ops.index": "0.3.2", "jax.ops.index_update": "0.3.2", "jax.ops.index_add": "0.3.2",
    "jax.ops.index_mul": "0.3.2", "jax.ops.index_min": "0.3.2", "jax.ops.index_max": "0.3.2",
    "jax.numpy.DeviceArray": "0.4.14",
    "jax.interpreters.xla.DeviceArray": "0.4.11",
    "jax.interpreters.pxla.ShardedDeviceArray": "0.4.14",
    "jax.profiler.TraceContext": "0.3.15", "jax.profiler.StepTraceContext": "0.3.15",
    "jax.profiler.trace_function": "0.3.15", "jax.experimental.optimizers": "0.3.16",
    "jax.experimental.stax": "0.3.16", "jax.api": "0.2.21", "jax.soft_pmap": "0.3.18",
    "jax.custom_transforms": "0.2.12",
    "jax.interpreters.pxla.make_sharded_device_array": "0.4.14",
    "jax.experimental.global_device_array": "0.4.7", "jax.experimental.loops": "0.3.16",
    "jax.experimental.optix": "0.2.7", "jax.experimental.sharded_jit": "0.3.16",
    "jax.experimental.maps": "0.4.31", "jax.experimental.host_callback": "0.8.0",
}
OVERRIDES.update((n, (r, "the release notes narrow the census window"))
                 for n, r in _NARROWED.items())

# Records of modules: their fact is the module's sources (census_data/
# modules.txt) where they tell, as ``jax.config`` the module went in 0.4.29
# while ``jax.config`` the attribute stays.
_MODULE_RECORDS = {r.name for r in MODULES + REFUSED_MODULES}


def removal_release(name):
    """The release that removed ``name``: ``OVERRIDES``, else the census,
    else (a module record) its sources; ``census.TARGET_RELEASE`` for a name
    the census has no removal for (JAX 0.10 lists it, but not as the classic
    one was)."""
    override = OVERRIDES.get(name)
    if override is not None:
        return override[0]
    found = census.removed_in(name)
    if (found is None or found.startswith("after")) and name in _MODULE_RECORDS:
        found = census.module_removed_in(name) or found
    return found or census.TARGET_RELEASE


_ALL = {r.name: r for group in (NAMES, REAL_USE, CONFIG_ATTRS, ARRAY_METHODS,
                                ARRAY_PROPERTIES, UNSERVABLE, REFUSED_REAL_USE,
                                PROPERTIES, SHARDING_PROPERTIES, MODULES,
                                REFUSED_NAMES, REFUSED_MODULES, SYSTEMS) for r in group}

# The jax._src module that holds today what each classic internal module held
# (census_public_homes looks a classic name's object up there).
PRIVATE_HOMES = {
    "jax.core": "jax._src.core", "jax.util": "jax._src.util",
    "jax.test_util": "jax._src.test_util", "jax.api_util": "jax._src.api_util",
    "jax.dtypes": "jax._src.dtypes", "jax.custom_derivatives": "jax._src.custom_derivatives",
    "jax.lib.xla_bridge": "jax._src.xla_bridge", "jax.experimental.pjit": "jax._src.pjit",
    "jax.tree_util": "jax._src.tree_util", "jax.ad_util": "jax._src.ad_util",
    "jax.lax": "jax._src.lax.lax", "jax.linear_util": "jax._src.linear_util",
    "jax.interpreters.ad": "jax._src.interpreters.ad",
    "jax.interpreters.batching": "jax._src.interpreters.batching",
    "jax.interpreters.partial_eval": "jax._src.interpreters.partial_eval",
    "jax.interpreters.mlir": "jax._src.interpreters.mlir",
    "jax.interpreters.pxla": "jax._src.interpreters.pxla",
}

# JAX internals classic modules re-exported that JAX still has, public, under
# jax.extend: served as the same objects. (owner, where JAX has them now)
_SAME_OBJECTS = (("jax.core", "jax.extend.core"),
                 ("jax.lax", "jax.extend.core.primitives"),
                 ("jax.random", "jax.extend.random"))


def census_records():
    """A record for every census name this table does not spell out: served
    as the same object where ``jax.extend`` has it (``_SAME_OBJECTS``),
    otherwise a removed JAX internal. Built on first use; whether each is
    installed (only where this JAX lacks it) is the installer's job."""
    global _CENSUS
    if _CENSUS is None:
        import importlib
        records = {}
        sources = {}
        for owner, source in _SAME_OBJECTS:
            sources[owner] = importlib.import_module(source)
        homes = census.public_homes()
        for module, attr in census.union():
            name = f"{module}.{attr}"
            if name in _ALL or not census.missing_here(name):
                continue
            source = sources.get(module)
            ours = _ALL.get(module)
            outside = _outside_object(census.origin(name))
            owner_here = not census.missing_here(module) or (
                ours is not None and (ours.make is not None
                                      or ours.served_by.startswith("pmapkit.")))
            if outside is not None and owner_here:
                # a classic module re-exported it from the standard library
                # or numpy (``from functools import partial``): that object
                origin = census.origin(name)
                records[name] = Removed(name, origin, f"import {origin.rpartition('.')[0]}",
                                        f"{origin} (the same object)",
                                        lambda value=outside: value)
            elif ours is not None and ours.served_by.startswith("pmapkit."):
                # a module pmapkit serves: its own name where it has one
                records[name] = Removed(name, INTERNAL, "",
                                        f"{ours.served_by}.{attr}, where pmapkit has it")
            elif ours is not None and ours.make is not None:
                # a module served from today's API: the name where it has it
                records[name] = Removed(name, ours.modern, ours.example,
                                        f"{module}.{attr} in {ours.served_by}, where it has it")
            elif name in homes and owner_here:
                # the object JAX still exports under another public name
                public = homes[name]
                records[name] = Removed(name, public, f"{public}  # the same object",
                                        f"{public} (the same object)",
                                        lambda public=public: _public_object(public),
                                        lazy=True)
            elif name in homes:
                # its module is gone: refused, naming the object JAX exports
                public = homes[name]
                records[name] = Removed(name, f"{public} (the same object)",
                                        f"from {public.rpartition('.')[0]} import "
                                        f"{public.rpartition('.')[2]}")
            elif source is not None and attr in vars(source):
                where = f"{source.__name__}.{attr}"
                records[name] = Removed(
                    name, where, f"from {source.__name__} import {attr}",
                    f"{where} (the same object)",
                    lambda source=source, attr=attr: getattr(source, attr))
            else:
                records[name] = Removed(name, INTERNAL, "")
        _CENSUS = records
    return _CENSUS


_CENSUS = None


def _public_object(name):
    """The object JAX's public dotted ``name`` names (its module imported)."""
    import importlib
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _outside_object(origin):
    """The object ``origin`` ("functools.partial") names, where it is the
    standard library's or numpy's and its module is already imported (no
    import for a census record); else None."""
    if not origin:
        return None
    import sys
    module, _, attr = origin.rpartition(".")
    root = module.partition(".")[0]
    if root not in ("numpy",) and (root not in sys.stdlib_module_names
                                   or root == "distutils"):
        return None
    loaded = sys.modules.get(module)
    return getattr(loaded, attr, None) if loaded is not None else None


def _optix_module():
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


def by_name(name):
    record = _ALL.get(name)
    return record if record is not None else census_records()[name]


def known(name):
    return name in _ALL or name in census_records()


def array_type():
    """JAX's concrete array class, where the device_buffers properties go."""
    return jp.ArrayImpl
