"""pmapkit: JAX's classic parallel dispatch layer, compiled, on jax 0.10.

Public surface (explicit re-exports only):
  pmap           the classic jax.pmap with a compiled per-call fast path
  pjit           the classic pjit (in/out_axis_resources, mesh at the call site)
  Mesh, mesh     a jax.sharding.Mesh that is also pjit's ``with mesh:`` context
  maps           ``Mesh``, ``mesh``, ``thread_resources`` of jax.experimental.maps
  with_sharding_constraint, PartitionSpec (jax's own class), NamedSharding
  ShardingSpec, NoSharding, Chunked, Unstacked, ShardedAxis, Replicated,
  parse_op_sharding   the classic sharding-spec types and conversions
  device_put_replicated, device_put_sharded
                 the classic placement helpers (stacked per-device values,
                 placed as a pmap takes them)
  clear_caches, set_cache_size
                 empty / bound pmapkit's caches (jax.clear_caches() empties
                 them too)
  set_cpu_collectives_in_flight
                 the bound on executions of collective programs in flight on
                 XLA:CPU (see pmapkit.inflight)
  COMPILED       True when the Cython dispatch core is in use
"""
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit._compiled import COMPILED
from pmapkit.caches import clear_caches, set_cache_size
from pmapkit.inflight import set_cpu_collectives_in_flight
from pmapkit.mesh import Mesh, mesh
from pmapkit import maps
from pmapkit.pjit import pjit, with_sharding_constraint
from pmapkit.placement import device_put_replicated, device_put_sharded
from pmapkit.pmap import pmap
from pmapkit.sharding_specs import (
    Chunked, NoSharding, Replicated, ShardedAxis, ShardingSpec, Unstacked,
    parse_op_sharding)
from pmapkit import rules as _rules  # noqa: F401  (registers transformation rules)

__all__ = ["COMPILED", "Chunked", "Mesh", "NamedSharding", "NoSharding",
           "PartitionSpec", "Replicated", "ShardedAxis", "ShardingSpec",
           "Unstacked", "clear_caches", "device_put_replicated", "device_put_sharded", "maps",
           "mesh", "parse_op_sharding", "pjit", "pmap", "set_cache_size",
           "set_cpu_collectives_in_flight", "with_sharding_constraint"]
__version__ = "0.1.0"
