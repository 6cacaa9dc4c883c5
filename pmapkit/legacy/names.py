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

import numpy as np

from pmapkit.legacy import census
from pmapkit.legacy import classic_devices
from pmapkit.legacy import classic_values as cv
from pmapkit.legacy import pmap_sharding
from pmapkit.legacy.classic_config import (CONFIG_OPTIONS, ConfigOption,  # noqa: F401
                                           RemovedConfigValueError, removed_config_text)
from pmapkit.legacy.names_real_use import (ARRAY_METHODS, ARRAY_PROPERTIES,  # noqa: F401
                                           CONFIG_ATTRS, REAL_USE, REFUSED_REAL_USE,
                                           UNSERVABLE)
from pmapkit.legacy.removed import (INTERNAL, OVERRIDES, Removed,  # noqa: F401
                                    RemovedAttributeError, RemovedFromJax,
                                    RemovedModuleError, removal_release)
from pmapkit.legacy.served_values import (  # noqa: F401
    abstract_arrays_module as _abstract_arrays_module, api_module as _api_module,
    array_type, array_type_value as _array_type, config_module as _config_module,
    device_buffer as _device_buffer, device_buffers as _device_buffers,
    import_module as _import, index_op as _index_op, local_shards as _local_shards,
    optix_module as _optix_module, profiler_alias as _profiler_alias, refused as _refused,
    refuse_assignment, served as _served, shuffle as _shuffle, stand_in_module,
    tie_in as _tie_in, tree_function as _tree)

__all__ = ["INTERNAL", "INDEX_METHODS", "census_records", "REAL_USE", "CONFIG_ATTRS", "ARRAY_METHODS",
           "ARRAY_PROPERTIES", "REFUSED_REAL_USE", "UNSERVABLE", "CONFIG_OPTIONS", "ConfigOption",
           "RemovedConfigValueError", "removed_config_text", "Removed", "RemovedFromJax", "RemovedAttributeError", "RemovedModuleError",
           "NAMES", "MODULES", "PROPERTIES", "SHARDING_PROPERTIES", "REFUSED_NAMES",
           "REFUSED_MODULES",
           "SYSTEMS", "by_name", "known", "array_type", "removal_release", "OVERRIDES",
           "PRIVATE_HOMES", "stand_in_module"]



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
       # the classic product of an iterable (1 when empty): what math.prod is
       # (jax.util.prod: in the served jax.util module, classic_values)
       Removed("jax._src.util.prod", "math.prod", "math.prod(x.shape)",
               "math.prod (the classic product of an iterable, 1 when empty)", cv.prod,
               rename=True),
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
    _served("jax.util", "math.prod for prod; the other helpers are JAX internals",
            "math.prod(x.shape)", "a module of the helpers JAX still has (jax._src.util: "
            "the same objects) and prod (math.prod)", cv.util_module),
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
    _served("jax.nn.functions", "jax.nn", "jax.nn.relu(x)",
            "a module of jax.nn's functions (the same objects)", cv.nn_functions_module),
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
    Removed("jax.xla_computation", "jax.jit(f).lower(*args), the AOT API",
            "jax.jit(f).lower(*args).as_text()"),
    Removed("jax.soft_pmap", "jax.vmap(f, in_axes, axis_name=axis_name)",
            "jax.vmap(f, axis_name='i')(xs)  # soft_pmap(f, 'i')(xs)'s values, "
            "collectives over 'i' included",
            why="soft_pmap spread the mapped axis over the local devices (a pmap of "
                "vmaps); a vmap with the same axis_name gives its values on one device, "
                "and jax.jit with in_shardings=NamedSharding(mesh, P('i')) spreads it"),
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
    Removed("jax.experimental.array_api", "jax.numpy (array-API compliant)",
            "import jax.numpy as xp"),
    Removed("jax.experimental.array_api.fft", "jax.numpy.fft", "jnp.fft.fft(x)"),
    Removed("jax.experimental.array_api.linalg", "jax.numpy.linalg", "jnp.linalg.inv(x)"),
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
        module_here = {}
        for module, attr in census.union():
            name = f"{module}.{attr}"
            if name in _ALL or not census.missing_here(name):
                continue
            source = sources.get(module)
            ours = _ALL.get(module)
            outside = _outside_object(census.origin(name))
            if module not in module_here:
                # its file on this JAX, and not refused by the table
                module_here[module] = census._file_spec(module) is not None and not any(
                    module == r.name or module.startswith(r.name + ".")
                    for r in REFUSED_MODULES)
            owner_here = (not census.missing_here(module) and module_here[module]) or (
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
        for name in census.real_use_missing() - set(_ALL) - set(records):
            # an internal real code reached that no release census lists
            # (jax._src.*, private names): refused as a JAX internal, naming
            # the public object where JAX exports it
            public = homes.get(name)
            records[name] = (Removed(name, f"{public} (the same object)",
                                     f"from {public.rpartition('.')[0]} import "
                                     f"{public.rpartition('.')[2]}")
                             if public else Removed(name, INTERNAL, ""))
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



def by_name(name):
    record = _ALL.get(name)
    return record if record is not None else census_records()[name]


def known(name):
    return name in _ALL or name in census_records()

