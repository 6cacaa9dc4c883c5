"""Effects and host callbacks: the effect registries pmapkit's ordered
effect joins, the ops a host callback lowers to, and JAX's runtime tokens
(pmapkit mirrors them process-wide and hands them on cheaply)."""
from __future__ import annotations

import functools as _functools

import numpy as _np
from jax._src import config as _config
from jax._src import core as _core
from jax._src import dispatch as _hcb_dispatch
from jax._src import effects as _hcb_effects
from jax._src import mesh as _mesh_lib
from jax._src import sharding_impls as _hcb_sharding_impls
from jax._src.interpreters import partial_eval as _pe
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc
from jax._src.lib.mlir.dialects import hlo as _hcb_hlo

# --- host_callback ---------------------------------------------------------------
# Names pmapkit.host_callback needs: the effect registries its ordered effect
# joins, eager evaluation of one equation, the sharding annotations a host
# callback op carries, PartitionId (which device of a manual SPMD region is
# calling back) and JAX's per-thread runtime tokens (barrier_wait).
Effect = _hcb_effects.Effect
ordered_effects = _hcb_effects.ordered_effects
shardable_ordered_effects = _hcb_effects.shardable_ordered_effects
lowerable_effects = _hcb_effects.lowerable_effects
control_flow_allowed_effects = _hcb_effects.control_flow_allowed_effects
custom_derivatives_allowed_effects = _hcb_effects.custom_derivatives_allowed_effects
remat_allowed_effects = _hcb_effects.remat_allowed_effects
partial_eval_kept_effects = _hcb_effects.partial_eval_kept_effects
apply_primitive = _hcb_dispatch.apply_primitive
prim_requires_devices_during_lowering = _hcb_dispatch.prim_requires_devices_during_lowering
SdyArray = _hcb_sharding_impls.SdyArray
SdyArrayList = _hcb_sharding_impls.SdyArrayList
SdyDim = _hcb_sharding_impls.SdyDim
use_shardy_partitioner = _config.use_shardy_partitioner
dce_rules = _pe.dce_rules
DropVar = _core.DropVar
abstract_token = _core.abstract_token


def partition_id_op():
    """An ``stablehlo.partition_id`` op (a ``ui32[]`` value)."""
    return _hcb_hlo.partition_id()


def create_token_op():
    """A ``stablehlo.create_token`` op (a fresh token value)."""
    return _hcb_hlo.create_token()


def watch_runtime_tokens(hook):
    """Call ``hook(device, token)`` whenever any thread records the runtime
    token of a computation it dispatched with effects or host callbacks.

    JAX keeps those tokens per thread (``jax.effects_barrier`` waits for the
    calling thread's only); the classic ``barrier_wait`` waited for every
    thread, so pmapkit mirrors each token into a process-wide table. The hook
    is installed once on JAX's token-set class and runs after JAX's own code.
    """
    cls = type(_hcb_dispatch.runtime_tokens)
    original = cls.set_output_runtime_token
    if getattr(original, "_pmapkit_hooks", None) is not None:
        original._pmapkit_hooks.append(hook)
        return

    def set_output_runtime_token(self, device, token):
        original(self, device, token)
        for h in set_output_runtime_token._pmapkit_hooks:
            h(device, token)

    set_output_runtime_token._pmapkit_hooks = [hook]
    cls.set_output_runtime_token = set_output_runtime_token


def hand_on_effect_tokens(effect_type):
    """Thread the tokens of ``effect_type`` from one computation into the
    next the cheap way, and let a failed computation not fail the next.

    For an ordered effect JAX waits for the previous computation's output
    token, then builds a fresh empty token on the computation's devices (a
    ``Mesh``, a ``NamedSharding`` and a ``device_put`` per call, about a
    third of a one-device program's dispatch). The wait is the ordering; the
    value is always the same empty array. Here the wait stays, and the
    empty array is built once per device list. A failed computation (a host
    callback raised) leaves a failed token; JAX would hand its error to every
    later computation with the effect: the wait here swallows it (that
    computation's error went to its caller).

    On the way out, JAX assembles a computation's per-device output tokens
    into one global array (a ``Mesh`` of the devices, a ``NamedSharding``,
    an array made of the single-device tokens: about half of an 8-device
    program's dispatch with a tap), only to wait on it before the next
    computation. Here the per-device tokens are kept as they come, and that
    wait (or ``jax.effects_barrier``) waits on each of them.
    """
    cls = type(_hcb_dispatch.runtime_tokens)
    original = cls.get_token_input
    watched = getattr(original, "_pmapkit_watched", None)
    if watched is not None:
        watched.add(effect_type)
        return

    def get_token_input(self, eff, devices):
        if type(eff) not in get_token_input._pmapkit_watched:
            return original(self, eff, devices)
        token = self.current_tokens.get(eff)
        if token is not None:
            try:
                token.block_until_ready()
            except Exception:  # noqa: BLE001 - that computation's error went to its caller
                del self.current_tokens[eff]
        return _core.Token(_empty_token_array(tuple(devices)))

    get_token_input._pmapkit_watched = watched = {effect_type}
    cls.get_token_input = get_token_input
    _keep_output_tokens_per_device(watched)


class _DeviceTokens:
    """The output tokens of one computation's effect, one per device, as
    they came out (what JAX's ``Token`` would wrap as one global array):
    waiting on it waits on each."""

    __slots__ = ("buffers",)

    def __init__(self, buffers):
        self.buffers = buffers

    def block_until_ready(self):
        _xc.batched_block_until_ready(self.buffers)  # one wait for all
        return self


def _keep_output_tokens_per_device(watched):
    """``ExecuteReplicated._handle_token_bufs``: a computation whose ordered
    effects are all ``watched`` keeps its output tokens per device
    (``_DeviceTokens``); any other goes JAX's way."""
    original = _pxla.ExecuteReplicated._handle_token_bufs

    def _handle_token_bufs(self, token_bufs, sharded_token):
        effects = self.ordered_effects
        if not all(type(eff) in watched for eff in effects):
            return original(self, token_bufs, sharded_token)
        tokens = _hcb_dispatch.runtime_tokens
        for i, device in enumerate(self._local_devices):
            tokens.set_output_runtime_token(device, sharded_token.get_token(i))
        for eff, buffers in zip(effects, token_bufs):
            tokens.set_token_result(eff, _core.Token(_DeviceTokens(buffers)))

    _pxla.ExecuteReplicated._handle_token_bufs = _handle_token_bufs


@_functools.lru_cache(maxsize=64)
def _empty_token_array(devices):
    sharding = _hcb_sharding_impls.GSPMDSharding.get_replicated(devices)
    return _pxla.shard_args([sharding], [None], [_xc.ArrayCopySemantics.REUSE_INPUT],
                            [_np.zeros(0, _np.bool_)])[0]




def in_named_axis_scope():
    """Whether the code being traced runs per device: inside a manual
    region (``shard_map``, a pmap body) or under a named axis."""
    if _core.get_axis_env().axis_sizes:
        return True
    return bool(_mesh_lib.get_abstract_mesh().manual_axes)


def clear_runtime_tokens():
    """Forget the calling thread's runtime tokens (all already waited for)."""
    _hcb_dispatch.runtime_tokens.clear()
