"""Running a specialized colocated function on the host of its devices.

Two executors with one interface (``discover`` runs a first call and reports
the output specs; ``compile`` turns known output specs into the call used from
then on):

- ``IfrtExecutor``: the backend compiles colocated Python programs (jaxlib's
  IFRT program API). The function travels pickled; a first call without output
  specs runs a discovery program that stashes its results on the host and
  returns the specs, then a second program hands the stashed results over.
- ``InProcessExecutor``: backends whose compiler only takes HLO (PjRt CPU/GPU)
  run the function on the calling thread, which is on the devices' host. The
  function still makes the pickle round trip, so what it captures is a copy in
  both cases, and its results are checked against the output specs as the
  IFRT program would.

Which one a backend gets is decided once per client, by compiling a no-op
colocated program.
"""
from __future__ import annotations

import base64
import random
import threading

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.colocated_python import serialization
from pmapkit.colocated_python.specs import NOT_AN_ARRAY, ShapeDtypeStruct, array_spec

_tree_flatten = jax.tree_util.tree_flatten
_tree_unflatten = jax.tree_util.tree_unflatten
_EMPTY_CALL_TREEDEF = _tree_flatten(((), {}))[1]
_SUPPORT_LOCK = threading.Lock()
_CLIENT_RUNS_PROGRAMS: dict = {}  # client -> bool


def make_executor(name, fun, in_specs, devices):
    """The executor for one input specialization of ``fun`` on ``devices``."""
    if _client_runs_colocated_programs(devices):
        return IfrtExecutor(name, fun, in_specs, devices)
    _check_some_local(name, devices)
    return InProcessExecutor(name, fun, in_specs, devices)


def _check_some_local(name, devices):
    """In a multi-process run the in-process executor runs ``fun`` in every
    process that calls it, with what that process holds: it must hold some of
    the devices (another process's devices are not reachable from here)."""
    me = devices[0].client.process_index()
    if any(d.process_index == me for d in devices):
        return
    raise ValueError(
        f"colocated_python function {name} is specialized for devices "
        f"{list(devices)} of process(es) "
        f"{sorted({d.process_index for d in devices})}, but this is process "
        f"{me}: in a multi-process run a colocated function runs in each "
        "process for that process's own devices; call it for this process's "
        "devices (jax.local_devices()) or from the process that owns them.")


# -- checks shared by both executors ----------------------------------------------
def result_specs(result, devices, name):
    """(treedef, specs) of a first call's result; every leaf a jax.Array on
    ``devices``."""
    leaves, treedef = _tree_flatten(result)
    specs = tuple(array_spec(x) for x in leaves)
    allowed = set(devices)
    for i, spec in enumerate(specs):
        stray = spec.sharding.device_set - allowed
        if stray:
            raise ValueError(
                f"colocated_python function {name} returned output {i} on "
                f"{sorted(stray, key=lambda d: d.id)}, outside its devices "
                f"{list(devices)}")
    return treedef, specs


def _mismatch(name, out_specs, leaves, treedef):
    out_treedef, specs = out_specs
    if treedef != out_treedef:
        return ValueError(
            f"colocated_python function {name} returned a result structured as "
            f"{treedef}, but its output specs are structured as {out_treedef}")
    for i, (x, spec) in enumerate(zip(leaves, specs)):
        if not isinstance(x, jax.Array):
            return ValueError(NOT_AN_ARRAY.format(type(x)))
        if (x.shape, x.dtype) != (spec.shape, spec.dtype) or not (
                x.sharding == spec.sharding
                or x.sharding.is_equivalent_to(spec.sharding, len(x.shape))):
            return ValueError(
                f"colocated_python function {name} returned output {i} as "
                f"{array_spec(x)}, but its output spec is {spec}")
    return None


# -- in-process -------------------------------------------------------------------
class InProcessExecutor:
    """Runs on the calling thread (the devices' host) a pickled copy of ``fun``."""

    def __init__(self, name, fun, in_specs, devices):
        self.name, self.devices = name, devices
        self.fun = serialization.deserialize(serialization.serialize(fun))

    def discover(self, args, kwargs):
        result = self.fun(*args, **kwargs)
        return result, result_specs(result, self.devices, self.name)

    def compile(self, out_specs):
        fun, name = self.fun, self.name
        out_treedef, specs = out_specs
        expected = [(s.shape, s.dtype, s.sharding) for s in specs]
        n = len(expected)

        def run(*args, **kwargs):
            result = fun(*args, **kwargs)
            leaves, treedef = _tree_flatten(result)
            # The cheap check first: same structure, and per leaf the same
            # shape, dtype and sharding object (jit hands out cached shardings).
            if treedef == out_treedef and len(leaves) == n:
                for x, (shape, dtype, sharding) in zip(leaves, expected):
                    if type(x) is not jp.ArrayImpl or x.shape != shape or \
                            x.dtype != dtype or x.sharding is not sharding:
                        break
                else:
                    return result
            error = _mismatch(name, out_specs, leaves, treedef)
            if error is not None:
                raise error
            # Equivalent shardings of another kind: hand out the declared one,
            # as the IFRT program would (no copy for an equivalent sharding).
            leaves = [x if x.sharding == s.sharding else jax.device_put(x, s.sharding)
                      for x, s in zip(leaves, specs)]
            return _tree_unflatten(out_treedef, leaves)

        return run


# -- IFRT colocated Python programs -----------------------------------------------
def _noop():
    return ()


def _client_runs_colocated_programs(devices):
    client = devices[0].client
    known = _CLIENT_RUNS_PROGRAMS.get(client)
    if known is not None:
        return known
    with _SUPPORT_LOCK:
        known = _CLIENT_RUNS_PROGRAMS.get(client)
        if known is None:
            try:
                _compile_program("pmapkit_colocated_probe", _noop,
                                 (_EMPTY_CALL_TREEDEF, ()),
                                 (_tree_flatten(())[1], ()), devices)
                known = True
            except jp.JaxRuntimeError as exc:
                # PjRt's compiler takes HLO programs only.
                if "requires an HloProgram" not in str(exc) and \
                        "UNIMPLEMENTED" not in str(exc):
                    raise
                known = False
            _CLIENT_RUNS_PROGRAMS[client] = known
    return known


def _is_key(spec):
    return jax.dtypes.issubdtype(spec.dtype, jax.dtypes.prng_key)


def _physical(spec):
    """The spec IFRT sees for ``spec``: PRNG keys travel as their key data."""
    if not _is_key(spec):
        return spec
    data = jax.eval_shape(jax.random.key_data, spec)
    ndim = len(spec.shape)
    sharding = spec.sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        trailing = (None,) * (len(data.shape) - ndim)
        sharding = jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec(*sharding.spec, *trailing))
    return ShapeDtypeStruct(data.shape, data.dtype, sharding=sharding)


class _KeyBoundary:
    """Host-side wrapper: PRNG key leaves arrive and leave as key data."""

    def __init__(self, fun, in_impls, out_impls):
        self.fun, self.in_impls, self.out_impls = fun, in_impls, out_impls

    def __call__(self, *args, **kwargs):
        leaves, treedef = _tree_flatten((args, kwargs))
        for i, impl in self.in_impls.items():
            leaves[i] = jax.random.wrap_key_data(leaves[i], impl=impl)
        args, kwargs = _tree_unflatten(treedef, leaves)
        leaves, treedef = _tree_flatten(self.fun(*args, **kwargs))
        for i in self.out_impls:
            leaves[i] = jax.random.key_data(leaves[i])
        return _tree_unflatten(treedef, leaves)


def _key_impls(specs):
    return {i: jp.prng_impl_name(s.dtype) for i, s in enumerate(specs) if _is_key(s)}


def _compile_program(name, fun, in_specs, out_specs, devices):
    """A callable over flat input leaves returning flat output leaves."""
    (in_treedef, in_leaves), (out_treedef, out_leaves) = in_specs, out_specs
    in_keys, out_keys = _key_impls(in_leaves), _key_impls(out_leaves)
    if in_keys or out_keys:
        fun = _KeyBoundary(fun, in_keys, out_keys)
    in_phys = tuple(_physical(s) for s in in_leaves)
    out_phys = tuple(_physical(s) for s in out_leaves)
    payload = serialization.serialize(
        (fun, in_treedef, in_phys, out_treedef, out_phys, devices))
    ifrt = jp.ifrt_programs
    program = ifrt.make_colocated_python_program(name, payload, devices,
                                                 in_phys, out_phys)
    executable = devices[0].client.compile_ifrt_program(
        program, ifrt.make_colocated_python_compile_options())
    handlers = jp.global_avals_to_results_handler(
        [jp.ShapedArray(s.shape, s.dtype) for s in out_phys],
        [s.sharding for s in out_phys], committed=True).handlers

    def run(leaves):
        leaves = [jax.random.key_data(x) if i in in_keys else x
                  for i, x in enumerate(leaves)] if in_keys else list(leaves)
        outs = executable.execute_sharded(leaves, with_tokens=False) \
            .consume_with_handlers(handlers)
        for i, impl in out_keys.items():
            outs[i] = jax.random.wrap_key_data(outs[i], impl=impl)
        return outs

    return run


# Results of first calls, kept on the host between the discovery program and
# the program that hands them to the caller.
_STASH: dict[int, list] = {}
_STASH_LOCK = threading.Lock()


def _replicated_string(text, devices):
    mesh = jax.sharding.Mesh(np.array(list(devices.addressable_device_list)), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    value = np.array(text, dtype=np.dtypes.StringDType())
    return jax.make_array_from_callback((), sharding, lambda _: value)


def _string_spec(devices):
    mesh = jax.sharding.Mesh(np.array(list(devices)), ("x",))
    return ShapeDtypeStruct((), np.dtypes.StringDType(), sharding=jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec()))


class DiscoverAndStash:
    """Host side of a first call: run, stash the results, return their specs
    (pickled, base64) as a replicated string array."""

    def __init__(self, fun, uid, devices, name):
        self.fun, self.uid, self.devices, self.name = fun, uid, devices, name

    def __call__(self, *args, **kwargs):
        result = self.fun(*args, **kwargs)
        specs = result_specs(result, self.devices, self.name)
        with _STASH_LOCK:
            _STASH[self.uid] = _tree_flatten(result)[0]
        text = base64.b64encode(serialization.serialize(specs)).decode("ascii")
        return _replicated_string(text, self.devices)


class PopStash:
    """Host side of the hand-over: the stashed results of one first call."""

    def __init__(self, uid, out_treedef):
        self.uid, self.out_treedef = uid, out_treedef

    def __call__(self):
        with _STASH_LOCK:
            leaves = _STASH.pop(self.uid)
        return _tree_unflatten(self.out_treedef, leaves)


def decode_specs(array):
    text = array.addressable_shards[0].data.item()
    return serialization.deserialize(base64.b64decode(text.encode("ascii")))


class IfrtExecutor:
    def __init__(self, name, fun, in_specs, devices):
        self.name, self.fun, self.in_specs, self.devices = name, fun, in_specs, devices

    def discover(self, args, kwargs):
        uid = random.getrandbits(63)
        spec_treedef = _tree_flatten(ShapeDtypeStruct((), np.float32))[1]
        discover = _compile_program(
            f"{self.name}_discover", DiscoverAndStash(self.fun, uid, self.devices, self.name),
            self.in_specs, (spec_treedef, (_string_spec(self.devices),)), self.devices)
        encoded, = discover(_tree_flatten((args, kwargs))[0])
        out_specs = decode_specs(encoded)
        hand_over = _compile_program(
            f"{self.name}_pop", PopStash(uid, out_specs[0]),
            (_EMPTY_CALL_TREEDEF, ()), out_specs, self.devices)
        result = _tree_unflatten(out_specs[0], hand_over([]))
        return result, out_specs

    def compile(self, out_specs):
        run_leaves = _compile_program(self.name, self.fun, self.in_specs, out_specs,
                                      self.devices)
        out_treedef = out_specs[0]

        def run(*args, **kwargs):
            return _tree_unflatten(out_treedef,
                                   run_leaves(_tree_flatten((args, kwargs))[0]))

        return run
