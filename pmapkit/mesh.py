"""pmapkit's own mesh context: the classic ``with mesh:`` for pjit.

JAX 0.10 deprecated its ``with mesh:`` resource environment and its jit only
finds meshes set with ``jax.set_mesh``. Classic pjit code enters a mesh and
calls pjit'd functions inside; pmapkit keeps that mesh in a thread-local
stack of its own (nesting restores the outer mesh on exit) and pjit reads it
at each call site.

``jax.sharding.Mesh`` objects are interned by JAX (constructing one returns a
shared instance), so ``pmapkit.Mesh`` wraps one rather than subclassing it;
``.jax_mesh`` is the wrapped mesh, usable with every JAX API.
"""
from __future__ import annotations

import contextlib
import threading

import jax
import numpy as np

from pmapkit import _jax_private as jp


class _MeshStack(threading.local):
    """Per thread: the entered meshes, each with its config-state context."""

    def __init__(self):
        self.entries = []


_stack = _MeshStack()

# The active mesh is also a JAX config state in the trace context, so any jit
# around a pjit'd call (jax.jit, or pmapkit's own caches, which key on the
# trace context) traces and caches separately per mesh.
_mesh_state = jp.make_trace_context_state(
    "pmapkit_active_mesh", "The mesh entered with `with pmapkit.Mesh(...)`.")


class Mesh:
    """A device mesh usable as ``with mesh:`` for pmapkit.pjit.

    Args:
      devices: an ndarray (or nested sequence) of devices, one dim per axis.
      axis_names: one name (str) per dimension of ``devices``.
    """

    def __init__(self, devices, axis_names):
        if isinstance(devices, jax.sharding.Mesh):
            self.jax_mesh = devices
            return
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        for name in axis_names:
            if not isinstance(name, str):
                raise TypeError(
                    f"Mesh axis_names must be strings, got {name!r} in {axis_names}.")
        if len(set(axis_names)) != len(axis_names):
            raise ValueError(f"Mesh axis_names must be unique, got {axis_names}.")
        devices = np.asarray(devices, dtype=object)
        if devices.ndim != len(axis_names):
            raise ValueError(
                f"Mesh devices has {devices.ndim} dimensions (shape "
                f"{devices.shape}) but {len(axis_names)} axis names "
                f"{axis_names} were given; give one name per dimension.")
        flat = list(devices.flat)
        if len(set(flat)) != len(flat):
            raise ValueError("Mesh devices must not repeat a device.")
        self.jax_mesh = jax.sharding.Mesh(devices, axis_names)

    # The read-only view classic code uses.
    @property
    def devices(self):
        return self.jax_mesh.devices

    @property
    def axis_names(self):
        return self.jax_mesh.axis_names

    @property
    def shape(self):
        return self.jax_mesh.shape

    @property
    def size(self):
        return self.jax_mesh.size

    @property
    def empty(self):
        return self.jax_mesh.empty

    def __enter__(self):
        state = _mesh_state(self.jax_mesh)
        state.__enter__()
        _stack.entries.append((self, state))
        return self

    def __exit__(self, exc_type, exc, tb):
        entered, state = _stack.entries.pop()
        assert entered is self, "pmapkit.Mesh contexts must exit in LIFO order"
        state.__exit__(exc_type, exc, tb)
        return False

    def __eq__(self, other):
        if isinstance(other, Mesh):
            other = other.jax_mesh
        return self.jax_mesh == other

    def __hash__(self):
        return hash(self.jax_mesh)

    def __repr__(self):
        axes = ", ".join(f"{n!r}: {s}" for n, s in self.shape.items())
        return f"pmapkit.Mesh({axes})"


@contextlib.contextmanager
def mesh(devices, axis_names):
    """The classic ``with mesh(devices, axis_names):`` context manager."""
    with Mesh(devices, axis_names) as m:
        yield m


def current_mesh():
    """The innermost mesh entered on this thread, or None."""
    entries = _stack.entries
    return entries[-1][0] if entries else None
