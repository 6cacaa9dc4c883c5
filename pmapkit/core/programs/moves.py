"""Moving device arrays whose layout is not the one a program takes.

The hit path (``_dispatch.CacheEntry.shard``) passes arrays laid out as the
compiled program wants as they are. The rest of a call's device arrays (an
uncommitted array on device 0, a committed one on some other device, an array
on another mesh or split otherwise) are collected and handed to the
program's ``Mover`` in one call per argument list. Per input and per source
sharding object the Mover decides once how to move such an array and
remembers it (bounded):

* ``COPY``: the source splits the array exactly as the program does, on other
  devices: all such inputs of a call go in one jaxlib
  ``batched_copy_array_to_devices_with_sharding``.
* ``PICK``: every slice the program wants is a shard of the source: those
  buffers go to their devices in one ``batched_device_put``.
* ``HOST``: a one-device (or fully replicated) array on CPU devices, fed to
  CPU devices: its bytes
  are read in place (a zero-copy host view, once the array is ready) and the
  program's slices put in one ``batched_device_put`` that copies them.
* anything else, or a source not ready yet: ``Mover.fallback``, the Python
  move of one leaf (``jax.device_put``; a re-view where only the names
  differ; host values by the program's host specs), which is also the
  program's ``shard_fallback`` for every leaf the hit path cannot take.

Moved inputs are new buffers, or buffers (or host views) of the caller's
array that the program only reads: a donated input is always a copy
(``Mover.copies``, the one rule for every way of moving), so donating a
moved array never consumes or overwrites the caller's one (the caller's
array stays alive).
"""
from __future__ import annotations

import jax
import numpy as np

from pmapkit import _jax_private as jp

COPY = "copy"
PICK = "pick"
HOST = "host"
FALLBACK = "fallback"
# Source shardings remembered per input (a new producer of inputs brings one;
# more evict the oldest).
MAX_PLANS = 8


class _Plan:
    __slots__ = ("kind", "positions", "indices", "devices", "device_list",
                 "sharding", "aval")

    def __init__(self, kind, sharding=None, aval=None, devices=None,
                 device_list=None, positions=None, indices=None):
        self.kind = kind
        self.sharding = sharding
        self.aval = aval
        self.devices = devices
        self.device_list = device_list
        self.positions = positions
        self.indices = indices


_FALLBACK = _Plan(FALLBACK)


def _index_key(index, shape):
    """A hashable, normalized form of one device's index tuple."""
    return tuple(s.indices(n) if isinstance(s, slice) else s
                 for s, n in zip(index, shape))


def _device_indices(sharding, shape):
    """(devices in the sharding's order, their normalized index keys)."""
    index_map = sharding.addressable_devices_indices_map(shape)
    devices = list(index_map)
    return devices, [_index_key(index_map[d], shape) for d in devices]


def plan_move(have, want, aval, physical_aval):
    """How to move an array of ``physical_aval`` placed by sharding ``have``
    to sharding ``want`` (``aval``: the program's aval of that input)."""
    shape = physical_aval.shape
    try:
        src_devices, src_keys = _device_indices(have, shape)
        dst_devices, dst_keys = _device_indices(want, shape)
    except Exception:  # noqa: BLE001 - shardings JAX cannot index here
        return _FALLBACK
    if not want.is_fully_addressable or not have.is_fully_addressable:
        return _FALLBACK
    if src_keys == dst_keys:
        return _Plan(COPY, sharding=want, aval=aval,
                     device_list=jp.DeviceList(tuple(dst_devices)))
    by_key = {}
    for k, (d, key) in enumerate(zip(src_devices, src_keys)):
        found = by_key.get(key)
        # Prefer the shard already on the device that takes it.
        if found is None or d in dst_devices:
            by_key.setdefault(key, []).append((k, d))
    positions = []
    for d, key in zip(dst_devices, dst_keys):
        candidates = by_key.get(key)
        if not candidates:
            positions = None
            break
        pos = candidates[-1][0]
        for k, src_d in candidates:
            if src_d == d:
                pos = k
                break
        positions.append(pos)
    if positions is not None:
        return _Plan(PICK, sharding=want, aval=aval, devices=dst_devices,
                     positions=tuple(positions))
    # One device, or every device a whole copy: read in place, no assembly.
    whole = len(src_devices) == 1 or have.is_fully_replicated
    if (whole and all(d.platform == "cpu" for d in src_devices)
            and all(d.platform == "cpu" for d in dst_devices)
            and not _special_dtype(aval)):
        index_map = want.addressable_devices_indices_map(shape)
        return _Plan(HOST, sharding=want, aval=aval, devices=dst_devices,
                     indices=tuple(index_map[d] for d in dst_devices))
    return _FALLBACK


def _special_dtype(aval):
    # Keys (extended dtypes) and float0 are not plain bytes to slice.
    return (jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended)
            or aval.dtype == jax.dtypes.float0)


class Mover:
    """Moves one program's misplaced inputs: plans per (input, source
    sharding), decided once, for the batched moves; ``fallback`` for one
    leaf no plan covers.

    Args:
      in_shardings: the program's sharding per flat input (logical: a key
        input's is its key array's).
      physical_in_shardings: the same, physical (a key input's buffers).
      in_avals: the program's aval per flat input.
      host_specs: per flat input, what puts a host value there.
      donated: flat indices of donated inputs (copied, never aliased).
      check: optional ``check(x, i)`` run first on each leaf (pjit refuses a
        committed array on devices its computation does not use).
    """

    def __init__(self, in_shardings, physical_in_shardings, in_avals, host_specs,
                 donated=None, check=None, plans=None):
        self.in_shardings = in_shardings
        self.physical_in_shardings = physical_in_shardings
        self.in_avals = in_avals
        self.host_specs = host_specs
        self.donated = frozenset(donated or ())
        self.check = check
        # Shared by the checking variant: the same program, the same plans.
        self.plans = [{} for _ in in_shardings] if plans is None else plans
        self.copy_semantics = (jp.ArrayCopySemantics.REUSE_INPUT,
                               jp.ArrayCopySemantics.ALWAYS_COPY)

    def copies(self, i):
        """Whether input ``i``, when it moves, must be a copy: a donated one
        (the program may overwrite what it is given, and the caller's array,
        maybe passed elsewhere in the call too, lives on). Every way of
        moving below asks this, and nothing else."""
        return i in self.donated

    def checking(self, check):
        """This mover, running ``check(x, i)`` on each leaf before moving it."""
        return Mover(self.in_shardings, self.physical_in_shardings, self.in_avals,
                     self.host_specs, self.donated, check, self.plans)

    def _plan(self, i, physical):
        have = physical.sharding
        plans = self.plans[i]
        plan = plans.get(have)
        if plan is None:
            aval = self.in_avals[i]
            plan = plan_move(have, self.physical_in_shardings[i], aval, physical.aval)
            if len(plans) >= MAX_PLANS:
                # pop, not del: another thread may have dropped it already.
                plans.pop(next(iter(plans), None), None)
            plans[have] = plan
        return plan

    def move(self, xs, flat_indices, fallback):
        """The program's arrays for leaves ``xs`` (flat inputs
        ``flat_indices``), in order; ``fallback(x, i)`` (the program's
        ``shard_fallback``: this mover's ``fallback`` or a program's own)
        moves what no plan covers, and raises JAX's errors for deleted
        arrays."""
        out = [None] * len(xs)
        copies = None
        for k, (x, i) in enumerate(zip(xs, flat_indices)):
            if self.check is not None:
                self.check(x, i)
            if type(x) is not jp.ArrayImpl or x.is_deleted():
                out[k] = fallback(x, i)
                continue
            plan = self._plan(i, x)
            kind = plan.kind
            copy = self.copies(i)
            if kind is COPY:
                if copies is None:
                    copies = ([], [], [], [], [])
                copies[0].append(k)
                copies[1].append(x)
                copies[2].append(plan.device_list)
                copies[3].append(plan.sharding)
                copies[4].append(self.copy_semantics[copy])
            elif kind is PICK:
                shards = x._arrays  # its single-device arrays, in its device order
                out[k] = jp.batched_device_put(
                    plan.aval, plan.sharding, [shards[p] for p in plan.positions],
                    plan.devices, True, force_copy=copy)
            elif kind is HOST and x.is_ready():
                # A zero-copy view of the CPU buffer, whose slices the put may
                # alias (the program only reads them); a copied input's
                # slices are copies, one per device.
                # (Not force_copy=: jaxlib fails on it for host slices that
                # repeat, as partly replicated shardings have.)
                view = np.asarray(x)
                slices = [view[idx] for idx in plan.indices]
                if copy:
                    slices = [piece.copy() for piece in slices]
                out[k] = jp.batched_device_put(
                    plan.aval, plan.sharding, slices, plan.devices, True)
            else:
                out[k] = fallback(x, i)
        if copies is not None:
            moved = jp.batched_copy_array_to_devices_with_sharding(
                copies[1], copies[2], copies[3], copies[4])
            for k, y in zip(copies[0], moved):
                out[k] = y
        return out

    def fallback(self, x, i):
        """Flat leaf ``i`` as the program takes it (its physical buffers for
        a key), moved in Python: whatever no plan covers (deleted arrays
        raise JAX's error here)."""
        sharding = self.in_shardings[i]
        aval = self.in_avals[i]
        alias = False if self.copies(i) else None  # None: JAX's default
        if isinstance(x, jp.PRNGKeyArray):
            if x.is_deleted():
                jp.raise_if_deleted(x._base_array)
            if x.sharding != sharding:
                x = jax.device_put(x, sharding, may_alias=alias)
            return x._base_array
        if isinstance(x, jp.ArrayImpl):
            if x.is_deleted():
                jp.raise_if_deleted(x)
            if (x.sharding.is_equivalent_to(sharding, x.ndim)
                    and x.aval.dtype == aval.dtype):
                # Same devices and slices under another name: re-view, no copy.
                return x._rewrap_with_aval_and_sharding(x.aval, sharding)
            return jax.device_put(x, sharding, may_alias=alias)
        if isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
            return self.host_specs[i].put(np.asarray(x))
        return jax.device_put(x, sharding)
