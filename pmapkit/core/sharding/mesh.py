"""pmapkit's mesh: a ``jax.sharding.Mesh`` that is also the classic
``with mesh:`` context of pjit.

``pmapkit.Mesh`` subclasses ``jax.sharding.Mesh``, so every JAX API takes it
(``NamedSharding``, ``jax.device_put``, ``jax.jit``, ``shard_map``). JAX
interns its meshes and compares them by identity; a ``pmapkit.Mesh`` keeps
the interned plain mesh of the same devices and axes and compares and hashes
as that mesh, so shardings built on either are equal and JAX's caches treat
them as one.

``with mesh:`` enters three things, restored in reverse on exit:
  * pmapkit's thread-local mesh stack (``current_mesh()``, nesting restores the
    outer mesh);
  * a trace-context state holding the mesh, so every jit cache (JAX's and
    pmapkit's) keys on it;
  * JAX's current mesh (``jax.set_mesh``), so JAX's own
    ``with_sharding_constraint(x, P(...))``, ``jax.jit(in_shardings=P(...))``
    and ``shard_map`` inside see it. ``jax.set_mesh`` cannot be entered while
    a JAX trace is active; there only pmapkit's context is set.
"""
from __future__ import annotations

import contextlib
import threading
import weakref

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.core.sharding import axis_names as axis_names_lib

_JaxMesh = jax.sharding.Mesh


class _MeshStack(threading.local):
    """Per thread: the entered meshes, each with the contexts it entered."""

    def __init__(self):
        self.entries = []


_stack = _MeshStack()

# The active mesh is also a JAX config state in the trace context, so any jit
# around a pjit'd call (jax.jit, or pmapkit's own caches, which key on the
# trace context) traces and caches separately per mesh.
_mesh_state = jp.active_mesh_state

# One pmapkit.Mesh per interned jax mesh (as JAX interns its own), so
# ``Mesh(d, n) is Mesh(d, n)`` like ``jax.sharding.Mesh``.
_interned = weakref.WeakValueDictionary()
_intern_lock = threading.Lock()


def plain_mesh(mesh):
    """The interned ``jax.sharding.Mesh`` a mesh (pmapkit's or JAX's) stands
    for."""
    return getattr(mesh, "_plain_mesh", mesh)


def _check_devices(devices, axis_names):
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    try:
        axis_names = tuple(axis_names)
    except TypeError:
        raise TypeError("Mesh axis_names must be a string or a sequence of "
                        f"strings, got {axis_names!r}.") from None
    for name in axis_names:
        # Classic meshes took any hashable name; jax 0.10's name their axes
        # with strings (Shardy): such a name gets its string (one per name,
        # which PartitionSpecs naming it read too). A tuple groups axes in a
        # PartitionSpec, so it cannot name one.
        try:
            hash(name)
        except TypeError:
            name = None
        if name is None or isinstance(name, (tuple, list)):
            raise TypeError(
                "Mesh axis_names must be hashable and not tuples (a str, or "
                "another hashable as classic meshes took), got "
                f"{axis_names!r}.")
    axis_names = tuple(map(axis_names_lib.mesh_name, axis_names))
    if len(set(axis_names)) != len(axis_names):
        raise ValueError(f"Mesh axis_names must be unique, got {axis_names}.")
    devices = np.asarray(devices, dtype=object)
    if devices.ndim != len(axis_names):
        raise ValueError(
            f"Mesh devices has {devices.ndim} dimensions (shape "
            f"{devices.shape}) but {len(axis_names)} axis names "
            f"{axis_names} were given; give one name per dimension.")
    flat = list(devices.flat)
    if not flat:
        raise ValueError(f"Mesh devices must hold at least one device, got shape "
                         f"{devices.shape}.")
    for d in flat:
        if not isinstance(d, jax.Device):
            raise TypeError(
                "Mesh devices must be jax.Device objects (e.g. "
                f"np.array(jax.devices())), got {d!r} of type {type(d).__name__}.")
    if len(set(flat)) != len(flat):
        raise ValueError("Mesh devices must not repeat a device.")
    return devices, axis_names


class Mesh(_JaxMesh):
    """A ``jax.sharding.Mesh`` that is also pjit's ``with mesh:`` context.

    Args:
      devices: an ndarray (or nested sequence) of devices, one dim per axis;
        or an existing ``jax.sharding.Mesh`` to adopt (``axis_names`` then
        may be omitted and must otherwise equal the mesh's).
      axis_names: one name (str) per dimension of ``devices``.
      axis_types: optional ``jax.sharding.AxisType`` per axis (default Auto,
        the classic pjit semantics).
    """

    def __new__(cls, devices, axis_names=None, axis_types=None):
        if isinstance(devices, _JaxMesh):
            if axis_names is not None and tuple(
                    (axis_names,) if isinstance(axis_names, str) else axis_names
            ) != devices.axis_names:
                raise ValueError(
                    f"Mesh got a jax Mesh with axis names {devices.axis_names} "
                    f"and axis_names={axis_names!r}; omit axis_names or give "
                    "the mesh's own.")
            if axis_types is not None and tuple(axis_types) != devices.axis_types:
                raise ValueError("Mesh got a jax Mesh and different axis_types.")
            plain = plain_mesh(devices)
        else:
            if axis_names is None:
                raise TypeError("Mesh() missing required argument 'axis_names'.")
            devices, axis_names = _check_devices(devices, axis_names)
            plain = plain_mesh(_JaxMesh(devices, axis_names, axis_types))
        with _intern_lock:
            mesh = _interned.get(plain)
            if mesh is None or type(mesh) is not cls:
                mesh = object.__new__(cls)
                # jax's Mesh is immutable (its __setattr__ raises).
                for name in ("devices", "axis_names", "axis_types", "size"):
                    object.__setattr__(mesh, name, getattr(plain, name))
                object.__setattr__(mesh, "_plain_mesh", plain)
                _interned[plain] = mesh
        return mesh

    def __init__(self, devices, axis_names=None, axis_types=None):
        del devices, axis_names, axis_types  # all done in __new__ (interned)

    @property
    def jax_mesh(self):
        """The mesh itself (it is a ``jax.sharding.Mesh``); kept for code
        written when pmapkit's mesh wrapped one."""
        return self

    # Equal to (and hashed as) the interned jax mesh of the same devices and
    # axes: JAX compares meshes by identity, so this is what makes
    # ``NamedSharding(pmapkit_mesh, s) == NamedSharding(jax_mesh, s)``.
    def __eq__(self, other):
        if isinstance(other, _JaxMesh):
            return self._plain_mesh is plain_mesh(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self._plain_mesh)

    def __enter__(self):
        state = _mesh_state(self)
        state.__enter__()
        jax_ctx = None
        try:
            if jp.trace_state_clean():
                jax_ctx = jax.set_mesh(self)  # applied when constructed
        except BaseException:
            state.__exit__(None, None, None)
            raise
        _stack.entries.append((self, state, jax_ctx))
        _push_resource_env(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        entered, state, jax_ctx = _stack.entries.pop()
        assert entered is self, "pmapkit.Mesh contexts must exit in LIFO order"
        try:
            _pop_resource_env()
            if jax_ctx is not None:
                jax_ctx.__exit__(exc_type, exc, tb)
        finally:
            state.__exit__(exc_type, exc, tb)
        return False

    def __repr__(self):
        axes = ", ".join(f"{n!r}: {s}" for n, s in self.shape.items())
        return f"pmapkit.Mesh({axes})"


def _push_resource_env(mesh):
    # Classic ``with mesh:`` made the mesh JAX's thread_resources.env
    # physical_mesh (jax.interpreters.pxla.thread_resources): code of the
    # time reads it, eagerly and inside pjit traces. Only the per-thread
    # stack is set: JAX's mesh context (part of its trace context) is not.
    resources = jp.thread_resources
    env = mesh.__dict__.get("_resource_env")
    if env is None:   # one per (interned) mesh: JAX's env holds only the mesh
        env = resources.stack[0]._replace(physical_mesh=mesh)
        object.__setattr__(mesh, "_resource_env", env)
    resources.stack.append(env)
    resources.env = env


def _pop_resource_env():
    resources = jp.thread_resources
    resources.stack.pop()
    resources.env = resources.stack[-1]


@contextlib.contextmanager
def mesh(devices, axis_names):
    """The classic ``with mesh(devices, axis_names):`` context manager."""
    with Mesh(devices, axis_names) as m:
        yield m


def current_mesh():
    """The innermost pmapkit mesh entered on this thread, or None."""
    entries = _stack.entries
    return entries[-1][0] if entries else None


def active_mesh():
    """The mesh a call site runs under, or None: the innermost of
    ``with pmapkit.Mesh``, ``jax.set_mesh`` and (deprecated) ``with jax_mesh:``.

    ``with pmapkit.Mesh`` sets JAX's concrete mesh too, so JAX's concrete mesh
    is the innermost of the first two whenever it is set; inside a JAX trace
    (where ``set_mesh`` is refused) pmapkit's own stack is what is set.
    """
    entries = _stack.entries
    if entries and entries[-1][2] is None:
        return entries[-1][0]  # entered under a trace: innermost by definition
    concrete = jp.get_concrete_mesh()
    if not concrete.empty:
        return concrete
    if entries:
        return entries[-1][0]
    physical = jp.thread_resources.env.physical_mesh
    if not physical.empty:
        return physical
    return None


# Their public home (what classic code imports, pickles name and the API
# reference documents) is pmapkit.mesh, which re-exports them.
Mesh.__module__ = mesh.__module__ = "pmapkit.mesh"
