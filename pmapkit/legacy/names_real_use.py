"""What real code reached (the census of real use, ``census.real_use()``)
that the release census served wrongly or not at all: classic internals
served as the objects JAX 0.10 holds, the config object's and the array's
classic members, and the names refused with the reason no faithful
equivalent exists. Part of the table ``pmapkit.legacy.names`` holds."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from pmapkit import _jax_private as jp
from pmapkit.legacy import classic_config
from pmapkit.legacy import classic_test_util
from pmapkit.legacy import classic_values as cv
from pmapkit.legacy.removed import INTERNAL, Removed
from pmapkit.legacy import served_values
from pmapkit.legacy.served_values import array_type_value, sharding_spec_property

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
    # issue 56: names one repository (or JAX's own tests) used
    Removed("jax.ad_checkpoint.checkpoint", "jax.checkpoint", "jax.checkpoint(f)",
            "jax.checkpoint (the function JAX 0.10 holds as jax._src.ad_checkpoint's "
            "checkpoint, as 0.4's jax.ad_checkpoint did)",
            lambda: jax.checkpoint, rename=True),
    Removed("jax.ad_checkpoint.remat", "jax.checkpoint", "jax.checkpoint(f)",
            "jax.checkpoint (0.4's jax.ad_checkpoint.remat was its checkpoint)",
            lambda: jax.checkpoint, rename=True),
    Removed("jax.interpreters.pxla.axis_index", "jax.lax.axis_index",
            "jax.lax.axis_index('i')", "jax.lax.axis_index (the same function)",
            lambda: jax.lax.axis_index, rename=True),
    Removed("jax.ad.primitive_jvps", "jax.interpreters.ad.primitive_jvps",
            "jax.interpreters.ad.primitive_jvps[prim] = jvp_rule",
            "jax.interpreters.ad.primitive_jvps (the same dict; classic jax.ad was "
            "jax.interpreters.ad)", cv.private_object("jax._src.interpreters.ad",
                                                      "primitive_jvps"), rename=True),
    Removed("jax.ad.primitive_transposes", "jax.interpreters.ad.primitive_transposes",
            "jax.interpreters.ad.primitive_transposes[prim] = transpose_rule",
            "jax.interpreters.ad.primitive_transposes (the same dict)",
            cv.private_object("jax._src.interpreters.ad", "primitive_transposes"),
            rename=True),
    Removed("jax._src.lax.control_flow.allowed_effects", INTERNAL, "",
            "jax._src.effects.control_flow_allowed_effects (the same object, as 0.4.5-0.4.x "
            "held it there)", cv.private_object("jax._src.effects",
                                                 "control_flow_allowed_effects")),
    Removed("jax._src.effects.EffectTypeSet.add", "EffectTypeSet.add_type",
            "jax.interpreters.mlir.lowerable_effects.add_type(type(effect))",
            "a property refusing it: the effect sets are of types since 0.4.5",
            cv.effect_set_add),
    Removed("jax._src.numpy.lax_numpy.ndarray", "jax.Array", "isinstance(x, jax.Array)",
            "jax.Array (jnp.ndarray, the class classic lax_numpy re-exported)",
            array_type_value, rename=True),
    Removed("jax._src.numpy.lax_numpy.float32", "jax.numpy.float32", "jnp.float32(1.5)",
            "jax.numpy.float32 (the scalar type classic lax_numpy defined)",
            lambda: jnp.float32, rename=True),
    Removed("jax.lax.pdot", "jax.lax.psum of jax.lax.dot_general",
            "jax.lax.psum(jax.lax.dot_general(x, y, (((1,), (0,)), ((), ()))), 'i')",
            "lax.psum(lax.dot_general(x, y, (pos_contract, pos_batch)), axis_name): "
            "what 0.4.30 lowered it to", cv.pdot),
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
            "jax.Array", array_type_value),
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
    Removed("jax.Array.local_data", "x.addressable_shards[i].data",
            "x.addressable_shards[0].data", "GlobalDeviceArray.local_data: the data of "
            "the i-th addressable shard", served_values.local_data),
)

ARRAY_PROPERTIES = (
    Removed("jax.Array._device", "x.devices() / x.committed",
            "next(iter(x.devices())) if x.committed else None",
            "the committed device of a one-device array, None when uncommitted "
            "(classic DeviceArray._device)", lambda: cv.array_device),
    Removed("jax.Array.sharding_spec", "x.sharding", "x.sharding",
            "the layout as a classic ShardingSpec (pmapkit.sharding_specs)",
            lambda: sharding_spec_property),
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
          "params", "the params['jaxpr'] of a call's jax.extend.core.JaxprEqn",
          "eqn.params['jaxpr']"),
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
    _gone("jax._src.lax.control_flow.for_loop", "the Ref-based for_loop prototype left "
          "JAX: loops carry their state functionally", "jax.lax.fori_loop",
          "jax.lax.fori_loop(0, n, lambda i, carry: body(i, carry), init)"),
    _gone("jax._src.lax.control_flow.for_loop.for_loop", "the Ref-based for_loop "
          "prototype left JAX: loops carry their state functionally", "jax.lax.fori_loop",
          "jax.lax.fori_loop(0, n, lambda i, carry: body(i, carry), init)"),
    _gone("jax.defvjp_all", "custom differentiation rules are custom_vjp's since JAX "
          "0.2", "jax.custom_vjp", "f = jax.custom_vjp(f); f.defvjp(fwd, bwd)"),
)
