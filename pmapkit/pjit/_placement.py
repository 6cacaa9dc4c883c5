"""Where a pjit runs and where its arguments go: the mesh of a call (the
mesh context, ``Sharding`` leaves, committed arguments, ``device=``), each
leaf's sharding on it, and the classic refusals of arguments committed to
other devices or laid out as a pmap's outputs."""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core.misses import committed_inputs
from pmapkit.core.lowering import pmap_layouts
from pmapkit.core.sharding import specs
from pmapkit.core.sharding.mesh import active_mesh


_DEVICE_AXIS = "_pmapkit_device"



def _refuse_pmap_layouts(tree, what):
    """A pmap output's sharding is not one of pjit's (classic pjit refused
    its ``PmapSharding``; pass a PartitionSpec or a NamedSharding)."""
    if tree is None:
        return
    for leaf in jax.tree_util.tree_leaves(tree, is_leaf=specs.is_spec_leaf):
        if isinstance(leaf, jax.sharding.Sharding) and pmap_layouts.is_pmap_output(leaf):
            raise ValueError(
                f"One of {what} leaf specifications got sharding {leaf} which is "
                "not allowed. (It is a pmap output's layout; give pjit a "
                "PartitionSpec, or a NamedSharding of your own.)")



def _device_mesh(device):
    return jax.sharding.Mesh(np.array([device], dtype=object), (_DEVICE_AXIS,))



def _sharding_mesh(sharding):
    """The mesh a ``Sharding`` leaf or a committed array's sharding runs
    on: a NamedSharding's own, else one over its devices (a one-device mesh
    for a SingleDeviceSharding)."""
    if isinstance(sharding, NamedSharding):
        return sharding.mesh
    devices = list(sharding._device_assignment)
    return jax.sharding.Mesh(np.array(devices, dtype=object), (_DEVICE_AXIS,))



def _one_device_mesh(mesh):
    """Whether ``mesh`` is pjit's own mesh of one device (``device=``, or
    SingleDeviceSharding leaves/arguments): results come back as
    SingleDeviceShardings there, as from ``jax.jit``."""
    return mesh.axis_names == (_DEVICE_AXIS,) and mesh.devices.size == 1



def _declared_mesh(spec):
    for tree in (spec.in_resources, spec.out_resources):
        if tree is None:
            continue
        for leaf in jax.tree_util.tree_leaves(tree, is_leaf=specs.is_spec_leaf):
            if isinstance(leaf, jax.sharding.Sharding):
                return _sharding_mesh(leaf)
    return None



def _active_mesh(spec, flat_args=()):
    if spec.device is not None:
        if active_mesh() is not None:
            raise ValueError(
                "Mesh context manager should not be used with jit when backend "
                "or device is also specified as an argument to jit: pjit with "
                "device or backend runs on that one device; it must not be "
                "called under a mesh context (with mesh: / jax.set_mesh).")
        return _device_mesh(spec.device)
    current = active_mesh()
    if current is not None:
        return current
    # Without a mesh context, Sharding leaves still name their devices (0.4
    # pjit), and so do committed arguments where in_axis_resources is omitted.
    declared = _declared_mesh(spec)
    if declared is not None:
        return declared
    if spec.in_unspecified:
        for x in flat_args:
            if _committed(x):
                return _sharding_mesh(x.sharding)
        if spec.out_unspecified:
            # 0.4-era pjit without a mesh and without specs is jax.jit: on the
            # default device, results with SingleDeviceShardings.
            return _device_mesh(_default_device())
    raise RuntimeError("pjit requires a non-empty mesh! Are you sure that it's "
                       "defined at the call site? (enter one with "
                       "`with pmapkit.Mesh(devices, axis_names):`) Alternatively, "
                       "provide a XLACompatibleSharding to pjit and then the mesh "
                       "context manager is not required.")



def _default_device():
    chosen = jax.config.jax_default_device
    if isinstance(chosen, jax.Device):
        return chosen
    return jax.devices(chosen)[0] if isinstance(chosen, str) else jax.devices()[0]



def _to_sharding(leaf, mesh):
    if isinstance(leaf, NamedSharding):
        return leaf
    if isinstance(leaf, jax.sharding.Sharding):
        # A SingleDeviceSharding, or another kind replicated over its devices.
        return NamedSharding(_sharding_mesh(leaf), PartitionSpec())
    if leaf is None:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, leaf.to_partition_spec())



def _device_ids(devices):
    return [d.id for d in devices]



def _platform(devices):
    return devices[0].platform.upper() if devices else "?"



def _devices_mismatch(pjit_devices, array_devices, what):
    """Classic 0.4 pjit's message for an argument committed to devices the
    computation does not run on."""
    return (
        "Pjit's devices and Array's devices should be equal. Got Pjit's "
        f"device ids {_device_ids(pjit_devices)} on platform "
        f"{_platform(pjit_devices)} and Array's device ids "
        f"{_device_ids(array_devices)} on platform {_platform(array_devices)} "
        f"({what}; move it with jax.device_put first).")



def _arrays_mismatch(first_devices, array_devices, what):
    """Classic pjit's message for committed arguments on different devices
    (the computation runs where the first of them is)."""
    return (
        "Received incompatible devices for pjitted computation. Devices of all "
        "`Array` inputs and outputs should be the same. Got array device ids "
        f"{_device_ids(first_devices)} on platform {_platform(first_devices)} "
        f"and another array's device ids {_device_ids(array_devices)} on "
        f"platform {_platform(array_devices)} ({what}; move it with "
        "jax.device_put first).")



def _kept_sharding(x, mesh, describe, k, device_mode, mesh_from_arguments):
    """Where an argument goes when in_axis_resources is omitted: a committed
    array keeps its sharding, anything else is replicated over the mesh
    (``mesh_from_arguments``: the first committed argument's devices)."""
    replicated = NamedSharding(mesh, PartitionSpec())
    if device_mode or isinstance(x, jp.Tracer):
        return replicated  # a traced value has no committed placement to keep
    if not isinstance(x, jax.Array) or pmap_layouts.is_pmap_output(x.sharding):
        # A pmap's output is moved, as an uncommitted value (classic).
        return replicated
    if not x.committed:
        if len(x.sharding.device_set) > 1:
            # Classic pjit's and jax.jit's refusal (neither keeps nor moves it).
            raise NotImplementedError(
                "Having uncommitted Array sharded on multiple devices is not "
                f"supported. ({describe(k)} of pjit is uncommitted on devices "
                f"{sorted(_device_ids(x.sharding.device_set))}; commit it with "
                "jax.device_put(x, sharding) or pass in_axis_resources.)")
        return replicated
    sharding = x.sharding
    mesh_devices = list(mesh.devices.flat)
    if sharding.device_set != set(mesh_devices):
        have = sorted(sharding.device_set, key=lambda d: d.id)
        if mesh_from_arguments:
            raise ValueError(_arrays_mismatch(
                mesh_devices, list(sharding._device_assignment),
                f"{describe(k)} is committed to devices {_device_ids(have)}, but "
                "an earlier argument to devices "
                f"{sorted(_device_ids(mesh_devices))}, and with in_axis_resources "
                "omitted pjit runs where its committed arguments are"))
        raise ValueError(_devices_mismatch(
            mesh_devices, list(sharding._device_assignment),
            f"{describe(k)} is committed to devices {_device_ids(have)}, but "
            "the computation runs on the mesh's devices "
            f"{sorted(_device_ids(mesh_devices))}"))
    if isinstance(sharding, NamedSharding):
        return sharding
    if sharding.is_fully_replicated:
        return replicated
    raise ValueError(
        f"pjit: {describe(k)} has a {type(sharding).__name__}; with "
        "in_axis_resources omitted, committed arguments must have a "
        "NamedSharding (or be replicated).")



def _check_against(what, resources, avals, mesh, describe, even=True):
    for k, (leaf, aval) in enumerate(zip(resources, avals)):
        if isinstance(leaf, NamedSharding):
            parsed = specs.ParsedPartitionSpec.from_user_input(leaf.spec, what)
            parsed.check_shape(aval.shape, leaf.mesh, what,
                               describe(k) if describe else None, sharding=leaf,
                               even=even)
        elif isinstance(leaf, specs.ParsedPartitionSpec):
            leaf.check_shape(aval.shape, mesh, what,
                             describe(k) if describe else None, even=even)



def _check_same_devices(spec, in_shardings, out_shardings, describe):
    """Every sharding of one program is over the same devices, in one order
    (0.4 pjit's device-assignment check), before anything compiles."""
    def label(what, k):
        if what == "in":
            return f"{spec.in_what} of {describe(k)}"
        return f"{spec.out_what} of output {k}"

    first = None
    for what, shardings in (("in", in_shardings), ("out", out_shardings)):
        for k, s in enumerate(shardings):
            if s is None:
                continue
            devices = tuple(s._device_assignment)
            if first is None:
                first = (what, k, devices)
                continue
            if devices == first[2]:
                continue
            ids = first[2]
            # jax.jit's words, and 0.4 pjit's (which said it of any clash).
            raise ValueError(
                "Received incompatible devices for pjitted computation (Pjit's "
                "devices and Array's devices should be equal). Got "
                f"{label(first[0], first[1])} with device ids "
                f"{_device_ids(ids)} on platform {_platform(ids)} and "
                f"{label(what, k)} with device ids {_device_ids(devices)} on "
                f"platform {_platform(devices)}: every sharding of one pjit "
                "must be over the same devices, in the same order.")



def _committed_placement(x):
    """What an argument's placement adds to the program when
    in_axis_resources is omitted: a committed array's sharding, else None."""
    if _committed(x):
        return x.sharding
    return None



def _committed(x):
    """Whether ``x`` is a committed array whose placement pjit keeps: a
    pmap's output is not (classic jit and pjit took it as an uncommitted
    value, moved where the computation runs)."""
    return (isinstance(x, jax.Array) and not isinstance(x, jp.Tracer) and x.committed
            and not pmap_layouts.is_pmap_output(x.sharding))



def _other_devices_check(in_shardings, describe):
    """``check(x, i)`` refusing a committed argument on devices the
    computation does not run on; ``describe(i)`` names flat input ``i``
    (the miss path, and the hit path's guard)."""
    def check(x, i):
        want = in_shardings[i]
        if committed_inputs.on_other_devices(x, want):
            raise ValueError(_devices_mismatch(
                list(want._device_assignment), list(x.sharding._device_assignment),
                f"{describe(i)} is committed there"))

    return check
