"""Named modules of classic JAX: ``PUBLIC_MODULES``, the documented API
that ``census_public_homes`` searches for a classic object's public name
today, and ``ERA_MODULES``, modules of the 0.1-0.4.12 releases. The release
census itself reads no list: the collector and the sdist reader walk every
public module of each release (``census_collect``, ``census_sources``);
``census_real_use`` takes both lists as modules when it tells a module
from a name."""

__all__ = ["PUBLIC_MODULES", "ERA_MODULES"]

# The modules a classic program imported: JAX's documented API of the 0.4 to
# 0.9 releases, and the internals libraries of the time reached for
# (jax.core, jax.interpreters.*, jax.util, jax.lib).
PUBLIC_MODULES = (
    "jax", "jax.numpy", "jax.numpy.linalg", "jax.numpy.fft", "jax.lax", "jax.lax.linalg",
    "jax.random", "jax.nn", "jax.nn.initializers", "jax.scipy", "jax.scipy.linalg",
    "jax.scipy.special", "jax.scipy.stats", "jax.scipy.signal", "jax.scipy.ndimage",
    "jax.scipy.optimize", "jax.scipy.sparse", "jax.scipy.sparse.linalg", "jax.scipy.fft",
    "jax.scipy.integrate", "jax.scipy.cluster", "jax.scipy.cluster.vq", "jax.scipy.interpolate",
    "jax.scipy.spatial", "jax.scipy.spatial.transform",
    "jax.tree_util", "jax.tree", "jax.sharding", "jax.stages", "jax.errors", "jax.dtypes",
    "jax.debug", "jax.profiler", "jax.image", "jax.ops", "jax.dlpack", "jax.distributed",
    "jax.custom_derivatives", "jax.custom_batching", "jax.custom_transpose", "jax.flatten_util",
    "jax.monitoring", "jax.typing", "jax.export", "jax.ffi", "jax.ref",
    "jax.core", "jax.util", "jax.api_util", "jax.linear_util", "jax.abstract_arrays",
    "jax.lib", "jax.lib.xla_bridge",
    "jax.interpreters", "jax.interpreters.ad", "jax.interpreters.batching",
    "jax.interpreters.partial_eval", "jax.interpreters.mlir", "jax.interpreters.xla",
    "jax.interpreters.pxla",
    "jax.extend", "jax.extend.core", "jax.extend.linear_util", "jax.extend.random",
    "jax.extend.backend", "jax.extend.ffi", "jax.extend.mlir", "jax.extend.source_info_util",
    "jax.example_libraries", "jax.example_libraries.optimizers", "jax.example_libraries.stax",
    "jax.experimental", "jax.experimental.pjit", "jax.experimental.maps",
    "jax.experimental.host_callback", "jax.experimental.mesh_utils",
    "jax.experimental.multihost_utils", "jax.experimental.shard_map",
    "jax.experimental.checkify", "jax.experimental.custom_partitioning",
    "jax.experimental.compilation_cache", "jax.experimental.compilation_cache.compilation_cache",
    "jax.experimental.export", "jax.experimental.ode", "jax.experimental.x64_context",
)


# Public modules of the 0.1-0.4.12 releases that today's list
# (census_collect.PUBLIC_MODULES) lacks: the API modules of the time
# (jax.api, jax.config, jax.lax_linalg), the internals classic libraries and
# tutorials imported (jax.abstract_arrays, jax.ad_util, jax.interpreters.*),
# and the jax.experimental modules of those years.
ERA_MODULES = (
    "jax.api", "jax.config", "jax.abstract_arrays", "jax.ad_util", "jax.lax_linalg",
    "jax.test_util", "jax.lazy", "jax.experimental.optimizers", "jax.experimental.stax",
    "jax.experimental.loops", "jax.experimental.optix", "jax.experimental.vectorize",
    "jax.experimental.jet", "jax.experimental.callback", "jax.experimental.doubledouble",
    "jax.experimental.global_device_array", "jax.experimental.sharded_jit",
    "jax.experimental.general_map", "jax.experimental.djax", "jax.experimental.sparse",
    "jax.experimental.array_api", "jax.experimental.gda_serialization",
    "jax.experimental.jax2tf.jax_export",
    "jax.interpreters.sharded_jit", "jax.interpreters.masking",
    "jax.interpreters.invertible_ad", "jax.lib.xla_client",
)
