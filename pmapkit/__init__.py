"""pmapkit: JAX's classic parallel dispatch layer, compiled, on jax 0.10.

Public surface (explicit re-exports only):
  pmap           the classic jax.pmap with a compiled per-call fast path
  pjit           the classic pjit (in/out_axis_resources, mesh at the call site)
  Mesh, mesh     pmapkit's mesh context for pjit (``with Mesh(...):``)
  with_sharding_constraint, PartitionSpec (jax's own class), NamedSharding
  ShardingSpec, NoSharding, Chunked, Unstacked, ShardedAxis, Replicated,
  parse_op_sharding   the classic sharding-spec types and conversions
  COMPILED       True when the Cython dispatch core is in use
"""
import os as _os

from pmapkit._locate import installed_build_dir as _installed_build_dir

_build = _installed_build_dir(_os.path.dirname(_os.path.abspath(__file__)))
if _build is not None:
    __path__.insert(0, _build)  # noqa: F821 (package __path__)
del _build, _installed_build_dir, _os

from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

from pmapkit._compiled import COMPILED  # noqa: E402
from pmapkit.mesh import Mesh, mesh  # noqa: E402
from pmapkit.pjit import pjit, with_sharding_constraint  # noqa: E402
from pmapkit.pmap import pmap  # noqa: E402
from pmapkit.sharding_specs import (  # noqa: E402
    Chunked, NoSharding, Replicated, ShardedAxis, ShardingSpec, Unstacked,
    parse_op_sharding)
from pmapkit import rules as _rules  # noqa: E402,F401  (registers transformation rules)

__all__ = ["COMPILED", "Chunked", "Mesh", "NamedSharding", "NoSharding",
           "PartitionSpec", "Replicated", "ShardedAxis", "ShardingSpec",
           "Unstacked", "mesh", "parse_op_sharding", "pjit", "pmap",
           "with_sharding_constraint"]
__version__ = "0.1.0"
