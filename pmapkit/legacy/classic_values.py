"""Values pmapkit.legacy serves for classic names that JAX 0.10 has under
another name, or as a small adapter of identical semantics (the census in
``names`` says which name each serves). Each builder returns the value;
nothing here is installed by importing it.
"""
from __future__ import annotations

import contextlib
import types
import typing
import warnings

import jax
import jax.numpy as jnp

from pmapkit import _jax_private as jp

__all__ = []


def _module(name, doc, **values):
    module = types.ModuleType(name, doc)
    module.__dict__.update(values)
    return module


def _named(fn, name, module, doc):
    """``fn`` made under another name, as the classic ``module.name`` reads."""
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = module
    fn.__doc__ = doc
    return fn


# -- x64 ------------------------------------------------------------------------

def enable_x64():
    @contextlib.contextmanager
    def enable_x64(new_val: bool = True):
        """Classic ``jax.experimental.enable_x64``: X64 mode set to
        ``new_val`` inside the block (``jax.enable_x64(new_val)``)."""
        with jax.enable_x64(new_val):
            yield
    enable_x64.__module__ = "jax.experimental"
    return enable_x64


def disable_x64():
    @contextlib.contextmanager
    def disable_x64():
        """Classic ``jax.experimental.disable_x64``: X64 mode off inside the
        block (``jax.enable_x64(False)``)."""
        with jax.enable_x64(False):
            yield
    disable_x64.__module__ = "jax.experimental"
    return disable_x64


def x64_context_module():
    return _module("jax.experimental.x64_context", "jax.experimental.x64_context "
                   "as JAX before 0.7 had it.", enable_x64=enable_x64(),
                   disable_x64=disable_x64())


# -- backends -------------------------------------------------------------------

def _host_ids():
    def host_ids(backend=None):
        """Classic ``jax.lib.xla_bridge.host_ids``: every process index."""
        return list(range(jax.process_count(backend)))
    host_ids.__module__ = "jax.lib.xla_bridge"
    return host_ids


def xla_bridge_module():
    import jax.extend.backend as backend
    import jaxlib.xla_client as xla_client
    # The device queries of classic xla_bridge were the functions jax's own
    # (jax.device_count, ...) called: the same signatures, backend=None.
    return _module("jax.lib.xla_bridge", "jax.lib.xla_bridge as JAX 0.1 to 0.4 had "
                   "it: jax.extend.backend's functions and the device queries.",
                   get_backend=backend.get_backend, default_backend=jax.default_backend,
                   get_compile_options=backend.get_compile_options, xla_client=xla_client,
                   device_count=jax.device_count, local_device_count=jax.local_device_count,
                   devices=jax.devices, local_devices=jax.local_devices,
                   process_index=jax.process_index, process_count=jax.process_count,
                   host_id=jax.process_index, host_count=jax.process_count,
                   host_ids=_host_ids())


def xla_client():
    """``jax.lib.xla_client``: jaxlib's module. Classic releases had it as a
    module file too (``import jax.lib.xla_client``): the module is listed
    under that name as well when it is served, so the import finds it
    without pmapkit's finder building anything."""
    import sys
    import jaxlib.xla_client
    sys.modules.setdefault("jax.lib.xla_client", jaxlib.xla_client)
    return jaxlib.xla_client


def started_backends():
    """Classic ``xla_client._local_backends``: ``None`` until JAX starts its
    backends (its first operation), then ``{platform: backend}``; reading it
    starts nothing."""
    return dict(jp.started_backends()) or None


def clear_backends():
    import jax.extend.backend
    return jax.extend.backend.clear_backends


def linear_util_module():
    import jax.extend.linear_util as lu
    names = [n for n in vars(lu) if not n.startswith("_")]
    return _module("jax.linear_util", "jax.linear_util as JAX before 0.4.24 had it: "
                   "jax.extend.linear_util's objects (the same ones).",
                   **{n: getattr(lu, n) for n in names})


def zeros_like_array():
    def zeros_like_array(x):
        """Classic ``jax.lax.zeros_like_array``: zeros of ``x``'s shape and
        dtype, weak type kept (``lax.full_like(x, 0)``)."""
        return jax.lax.full_like(x, 0)
    zeros_like_array.__module__ = "jax.lax"
    return zeros_like_array


def functools_partial():
    import functools
    return functools.partial


def maps_module():
    """``jax.experimental.maps`` as classic programs imported it: pmapkit's
    maps (``Mesh``, ``mesh``, ``ResourceEnv``, ``EMPTY_ENV``), with JAX's
    own ``thread_resources``, as the classic module shared it with
    ``jax.interpreters.pxla`` (both see ``with mesh:``). Taken from where JAX
    keeps it: ``pxla.thread_resources`` warns of its deprecation, which the
    classic import never did (and a test suite run with warnings as errors,
    as flax's, would stop there)."""
    from pmapkit.pjit import maps
    values = {n: getattr(maps, n) for n in maps.__all__}
    values["EMPTY_ENV"] = maps.EMPTY_ENV
    values["thread_resources"] = jp.thread_resources
    return _module("jax.experimental.maps", "jax.experimental.maps as JAX 0.2 to 0.4 "
                   "had it, for pjit: pmapkit.pjit.maps.", **values)


# -- jax.util -------------------------------------------------------------------

UTIL_HELPERS = ("HashableFunction", "cache", "safe_map", "safe_zip", "split_list",
                "split_list_checked", "subvals", "toposort", "unzip2", "wrap_name", "wraps")


def util_module():
    values = {}
    for name in UTIL_HELPERS:
        try:
            values[name] = jp.util_helper(name)
        except AttributeError:
            pass
    import math
    values.setdefault("prod", math.prod)    # jax.util.prod (JAX 0.1-0.2.0): math.prod
    return _module("jax.util", "jax.util as JAX before 0.5 had it: the helpers "
                   "JAX still has (the same objects), and prod (math.prod).", **values)


# -- sharding -------------------------------------------------------------------

def positional_sharding():
    from pmapkit.legacy.positional_sharding import PositionalSharding
    return PositionalSharding


def use_mesh():
    @contextlib.contextmanager
    def use_mesh(mesh):
        """Classic ``jax.sharding.use_mesh``: ``mesh`` is the concrete and
        abstract mesh inside the block (``with jax.set_mesh(mesh):``)."""
        with jax.set_mesh(mesh):
            yield
    use_mesh.__module__ = "jax.sharding"
    return use_mesh


# -- compilation cache ----------------------------------------------------------

def initialize_cache():
    def initialize_cache(path):
        """Classic ``initialize_cache``: sets ``jax_compilation_cache_dir``."""
        warnings.warn("initialize_cache is deprecated; use set_cache_dir instead",
                      DeprecationWarning, stacklevel=2)
        jax.config.update("jax_compilation_cache_dir", path)
    initialize_cache.__module__ = "jax.experimental.compilation_cache.compilation_cache"
    return initialize_cache


def is_initialized():
    def is_initialized():
        """Classic ``is_initialized``: whether the compilation cache is enabled."""
        warnings.warn("is_initialized is deprecated; do not use",
                      DeprecationWarning, stacklevel=2)
        return bool(jax.config.jax_enable_compilation_cache)
    is_initialized.__module__ = "jax.experimental.compilation_cache.compilation_cache"
    return is_initialized


# -- jax.numpy (NumPy 1.x names) -----------------------------------------------

def in1d():
    def in1d(ar1, ar2, assume_unique=False, invert=False):
        """NumPy 1.x ``in1d``: ``isin`` of ``ar1`` flattened."""
        del assume_unique   # unused, as in classic jax.numpy
        return jnp.isin(jnp.ravel(ar1), ar2, invert=invert)
    in1d.__module__ = "jax.numpy"
    return in1d


def jnp_alias(modern):
    return lambda: getattr(jnp, modern)


def constant(value):
    return lambda: value


# -- jax.random -----------------------------------------------------------------

def extend_random(name):
    def make():
        import jax.extend.random
        return getattr(jax.extend.random, name)
    return make


_IMPLS = {"threefry2x32": "threefry_prng_impl", "rbg": "rbg_prng_impl",
          "unsafe_rbg": "unsafe_rbg_prng_impl"}


def default_prng_impl():
    def default_prng_impl():
        """The PRNG implementation ``jax_default_prng_impl`` names."""
        import jax.extend.random
        return getattr(jax.extend.random, _IMPLS[jax.config.jax_default_prng_impl])
    default_prng_impl.__module__ = "jax.random"
    return default_prng_impl


def key_constructor(impl, name):
    def make():
        def constructor(seed):
            # Classic: a key of another implementation than the default
            # needs jax_enable_custom_prng; raw uint32 key data unless it is on.
            default = jax.config.jax_default_prng_impl
            custom = jax.config.jax_enable_custom_prng
            if not custom and default != impl:
                raise RuntimeError(
                    "jax_enable_custom_prng must be enabled in order to seed an RNG "
                    f'with an implementation "{impl}" differing from the default '
                    f'"{default}".')
            key = jax.random.key(seed, impl=impl)
            return key if custom else jax.random.key_data(key)
        return _named(constructor, name, "jax.random",
                      f"Classic ``jax.random.{name}``: a {impl} key from a seed.")
    return make


# -- jax.nn / jax.scipy ---------------------------------------------------------

def standardize():
    return jax.nn.standardize


def triangle(which):
    def make():
        fn = getattr(jnp, which)

        def tri(m, k=0):
            return fn(m, k)
        return _named(tri, which, "jax.scipy.linalg",
                      f"Classic ``jax.scipy.linalg.{which}``: ``jnp.{which}(m, k)``.")
    return make


# -- jax.tree_util --------------------------------------------------------------

def build_tree():
    def build_tree(treedef, xs):
        """Classic ``build_tree``: ``treedef.from_iterable_tree(xs)``."""
        return treedef.from_iterable_tree(xs)
    build_tree.__module__ = "jax.tree_util"
    return build_tree


class _KeyPathEntry(typing.NamedTuple):
    key: typing.Any


class GetitemKeyPathEntry(_KeyPathEntry):
    """Classic keypath entry for ``x[key]`` (``jax.tree_util.SequenceKey`` /
    ``DictKey`` today)."""

    def pprint(self) -> str:
        return f"[{self.key!r}]"

    def __str__(self):
        return self.pprint()


class AttributeKeyPathEntry(_KeyPathEntry):
    """Classic keypath entry for ``x.key`` (``jax.tree_util.GetAttrKey`` today)."""

    def pprint(self) -> str:
        return f".{self.key}"

    def __str__(self):
        return self.pprint()


for _cls in (GetitemKeyPathEntry, AttributeKeyPathEntry):
    _cls.__module__ = "jax.tree_util"


def keypath_entry(name):
    return lambda: {"GetitemKeyPathEntry": GetitemKeyPathEntry,
                    "AttributeKeyPathEntry": AttributeKeyPathEntry}[name]


# -- JAX internals still public under jax.extend --------------------------------

def same_object(module, attr):
    def make():
        import importlib
        return getattr(importlib.import_module(module), attr)
    return make


def extend_ffi_module():
    import jax.ffi
    names = ("ffi_call", "ffi_lowering", "include_dir", "pycapsule", "register_ffi_target")
    return _module("jax.extend.ffi", "jax.extend.ffi as JAX 0.4.3x had it: jax.ffi's "
                   "functions (the same objects).",
                   **{n: getattr(jax.ffi, n) for n in names if hasattr(jax.ffi, n)})


# -- issue 48: what real code reached ------------------------------------------

def private_object(module, attr):
    """() -> ``jax._src.<module>.<attr>``: the object classic JAX exported and
    JAX 0.10 still holds."""
    return lambda: jp.private_attr(module, attr)


def private_module(name):
    """() -> the ``jax._src`` module a classic module name was."""
    return lambda: jp.private_module(name)


def public_module(name):
    """() -> JAX's module ``name`` (a classic alias of it, ``jax.xla``)."""
    def make():
        import importlib
        return importlib.import_module(name)
    return make


def get_aval():
    # Classic core.get_aval: the abstract value of a value or tracer. JAX 0.10
    # calls it jax.typeof (concrete values give a ShapedArray: ConcreteArray
    # went in 0.4.36).
    return lambda: jax.typeof


def symbolic_equal_dim():
    return lambda: jp.definitely_equal


def replace_nones():
    def _replace_nones(sentinel, tree):
        """Classic ``jax._src.tree_util._replace_nones``: ``tree`` with every
        ``None`` (a node with no children) replaced by ``sentinel``."""
        return jax.tree_util.tree_map(lambda x: sentinel if x is None else x, tree,
                                      is_leaf=lambda x: x is None)
    _replace_nones.__module__ = "jax._src.tree_util"
    return _replace_nones


def not_mapped():
    # classic batching marked an unbatched operand with None
    return lambda: None


def seed_with_impl():
    def seed_with_impl(impl, seed):
        """Classic ``jax.prng.seed_with_impl``: a typed key of ``impl`` from
        ``seed`` (``jax.random.key(seed, impl=impl)``)."""
        return jax.random.key(seed, impl=impl)
    seed_with_impl.__module__ = "jax.prng"
    return seed_with_impl


def prng_module():
    import jax.extend.random as er
    values = {"seed_with_impl": seed_with_impl(), "PRNGKeyArray": jp.PRNGKeyArray}
    for name in ("PRNGImpl", "threefry_2x32", "threefry_prng_impl", "rbg_prng_impl",
                 "unsafe_rbg_prng_impl"):
        if hasattr(er, name):
            values[name] = getattr(er, name)
    return _module("jax.prng", "jax.prng as JAX 0.3 had it: seed_with_impl and the "
                   "PRNG implementations (jax.extend.random's objects).", **values)


def to_py(self):
    """Classic ``DeviceArray.to_py()``: the value as a NumPy array."""
    return jax.numpy.asarray(self).__array__()


def sharding_spec(self):
    """Classic ``ShardedDeviceArray.sharding_spec``: the array's layout as a
    classic ``ShardingSpec`` (a pmap output's mapped axis ``Unstacked``)."""
    from pmapkit import sharding_specs as ss
    from pmapkit.legacy import pmap_sharding
    sharding = self.sharding
    if not isinstance(sharding, jax.sharding.NamedSharding):
        raise AttributeError(f"sharding_spec: an array laid out by {type(sharding).__name__} "
                             "has no classic ShardingSpec (only mesh layouts had one)")
    mapped = pmap_sharding.mapped_dims(sharding)
    if mapped:
        parts = tuple(ss.Unstacked(self.shape[d]) if d in mapped else ss.NoSharding()
                      for d in range(self.ndim))
        return ss.ShardingSpec(sharding=parts, mesh_mapping=(ss.ShardedAxis(0),))
    return ss.named_sharding_to_sharding_spec(sharding, self.ndim)


# -- issue 56: names one repository used ---------------------------------------

def prod():
    """Classic ``jax.util.prod`` / ``jax._src.util.prod``: the product of an
    iterable, 1 for an empty one -- what ``math.prod`` computes (served as
    that function)."""
    import math
    return math.prod


def pdot():
    def pdot(x, y, axis_name, pos_contract=((), ()), pos_batch=((), ()), precision=None):
        """Classic ``jax.lax.pdot`` (JAX 0.2.x-0.4.30): the local
        ``lax.dot_general`` of ``x`` and ``y`` over the positional contracting
        and batch dimensions, summed over the mapped axes ``axis_name`` --
        what 0.4.30 lowered it to. Its gradient is the local product's (no
        sum over the axes), as classic pdot's transpose rules were."""
        names = tuple(axis_name) if isinstance(axis_name, (list, tuple)) else (axis_name,)
        dims = (tuple(map(tuple, pos_contract)), tuple(map(tuple, pos_batch)))

        def local(p, q):
            return jax.lax.dot_general(p, q, dims, precision=precision)

        @jax.custom_vjp
        def summed(p, q):
            return jax.lax.psum(local(p, q), names) if names else local(p, q)

        def forward(p, q):
            return summed(p, q), (p, q)

        def backward(residuals, cotangent):
            return jax.vjp(local, *residuals)[1](cotangent)

        summed.defvjp(forward, backward)
        return summed(x, y)
    pdot.__module__ = "jax.lax"
    return pdot



def array_device(self):
    """Classic ``DeviceArray._device``: the device a single-device array is
    committed to, None for an uncommitted one (``jax.device_put(x)`` without
    a device)."""
    devices = self.devices()
    if len(devices) != 1:
        raise AttributeError(f"_device: an array on {len(devices)} devices has no one "
                             "device (classic ShardedDeviceArrays had none): use "
                             "x.devices() or x.sharding")
    return next(iter(devices)) if self.committed else None


def effect_set_add():
    """``lowerable_effects.add`` / ``allowed_effects.add``: until JAX 0.4.4
    these were Python sets of effects; since 0.4.5 they are EffectTypeSets of
    effect types, with ``add_type``. A property that refuses, saying so."""
    from pmapkit.legacy.removed import RemovedAttributeError

    def add(self):
        raise RemovedAttributeError(
            "jax.interpreters.mlir.lowerable_effects.add (and "
            "jax._src.lax.control_flow.allowed_effects.add) was removed in JAX 0.4.5: "
            "the effect sets hold effect types since then; use add_type instead, e.g. "
            "jax.interpreters.mlir.lowerable_effects.add_type(type(effect))")
    return property(add)


def nn_functions_module():
    """``jax.nn.functions`` (JAX 0.1-0.2.0): the module of jax.nn's
    activation functions, the same objects jax.nn holds."""
    import jax.nn
    names = {n: getattr(jax.nn, n) for n in dir(jax.nn)
             if not n.startswith("_") and callable(getattr(jax.nn, n))}
    return _module("jax.nn.functions", "jax.nn.functions as JAX 0.1-0.2.0 had it: "
                   "jax.nn's functions (the same objects).", **names)
