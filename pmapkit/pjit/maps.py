"""``pmapkit.pjit.maps``: what code written against ``jax.experimental.maps``
(removed from JAX) used for pjit: ``Mesh``, the ``mesh`` context manager
and ``thread_resources.env.physical_mesh``.

``from jax.experimental import maps`` becomes ``from pmapkit import maps``.
``thread_resources.env`` describes the mesh active on this thread at the
moment it is read (pmapkit's ``with mesh:``, ``jax.set_mesh`` or JAX's own
``with jax_mesh:``); with none, ``physical_mesh`` is the empty mesh
(``.empty`` is True), as classic maps had it.
"""
from __future__ import annotations

import threading

from pmapkit import _jax_private as jp
from pmapkit.core.sharding.mesh import Mesh, active_mesh, mesh

__all__ = ["Mesh", "ResourceEnv", "mesh", "thread_resources"]


class ResourceEnv:
    """The resources a call site sees: the physical mesh (and, as classic
    maps, no xmap loops)."""

    __slots__ = ("physical_mesh", "loops")

    def __init__(self, physical_mesh, loops=()):
        self.physical_mesh = physical_mesh
        self.loops = tuple(loops)

    @property
    def shape(self):
        return self.physical_mesh.shape

    @property
    def local_shape(self):
        return self.physical_mesh.local_mesh.shape

    @property
    def physical_resource_axes(self):
        return set(self.physical_mesh.axis_names)

    @property
    def resource_axes(self):
        return self.physical_resource_axes

    def __eq__(self, other):
        return (isinstance(other, ResourceEnv)
                and self.physical_mesh == other.physical_mesh
                and self.loops == other.loops)

    def __hash__(self):
        return hash((self.physical_mesh, self.loops))

    def __repr__(self):
        axes = ", ".join(f"{n!r}: {s}" for n, s in self.physical_mesh.shape.items())
        return f"ResourceEnv(mesh=Mesh({axes}))"


EMPTY_ENV = ResourceEnv(jp.empty_concrete_mesh)


class _ThreadResources(threading.local):
    """``thread_resources.env``: the current thread's resource environment,
    read live from the active mesh."""

    @property
    def env(self):
        current = active_mesh()
        return EMPTY_ENV if current is None else ResourceEnv(current)


thread_resources = _ThreadResources()
