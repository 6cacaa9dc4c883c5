"""The classic ``pjit``: ``pjit`` and ``with_sharding_constraint``
(internals in ``_pjit``; ``_placement``: the mesh a call runs on and where
its arguments go; ``_constraint``: ``with_sharding_constraint``;
``_across``: a pjit whose mesh spans processes),
and ``maps``, the ``jax.experimental.maps`` surface. The mesh context and
the sharding-spec types it shares with pmap are in ``pmapkit.core``."""
from pmapkit.pjit._constraint import (
    EagerMeshUndefinedError, MeshUndefinedError, with_sharding_constraint)
from pmapkit.pjit._pjit import pjit

__all__ = ["EagerMeshUndefinedError", "MeshUndefinedError", "pjit",
           "with_sharding_constraint"]

# Where classic code (and pickle) finds them: the package, not its internals.
pjit.__module__ = with_sharding_constraint.__module__ = __name__
