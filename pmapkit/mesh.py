"""pmapkit's mesh: ``Mesh`` (a ``jax.sharding.Mesh``) and the classic
``mesh`` context (defined in the core's sharding room)."""
from pmapkit.core.sharding import mesh as _mesh
from pmapkit.core.sharding.mesh import Mesh, mesh

__all__ = ["Mesh", "mesh"]
__doc__ = _mesh.__doc__
