"""Writes classic_answers_jax_0.4.30.json: run with jax 0.4.30 (python3 -m venv /tmp/j430 &&
/tmp/j430/bin/pip install "jax==0.4.30" "jaxlib==0.4.30" "numpy<2"; JAX_PLATFORMS=cpu
/tmp/j430/bin/python classic_answers_jax_0.4.30.py > classic_answers_jax_0.4.30.json)."""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import importlib.util, pickle, json, sys
import numpy as np
import jax, jax.numpy as jnp
out = {"jax": jax.__version__}
from jax import lax
z = lax.zeros_like_array(jnp.arange(3.0))
out["zeros_like_array"] = [str(z.dtype), list(z.shape), z.tolist(), bool(getattr(z, "weak_type", False))]
z = lax.zeros_like_array(2)
out["zeros_like_array_scalar"] = [str(z.dtype), z.tolist(), bool(z.weak_type)]
from jax.lib import xla_bridge
out["xla_bridge.device_count"] = None  # gone by 0.4.30
from jax.lax import with_sharding_constraint
from jax.sharding import PartitionSpec as P, Mesh
try:
    with_sharding_constraint(jnp.ones(4), P("x"))
    out["wsc_eager"] = None
except Exception as e:
    out["wsc_eager"] = [type(e).__name__, str(e)]
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
try:
    with mesh:
        with_sharding_constraint(jnp.ones((4, 4)), P("z"))
except Exception as e:
    out["wsc_bad_axis"] = [type(e).__name__, str(e)]
from jax.sharding import PositionalSharding
s = PositionalSharding(jax.devices()).reshape(4, 2)
f = jax.jit(lambda a: a * 2, in_shardings=s.T, out_shardings=s)
x = jax.device_put(jnp.arange(16.0).reshape(4, 4), s.T)
try:
    y = f(jnp.arange(16.0).reshape(2, 8).T.copy() if False else x)
    out["positional_two_orders"] = [np.asarray(y).tolist(), [d.id for d in y.sharding._device_assignment], str(y.sharding)]
except Exception as e:
    out["positional_two_orders"] = [type(e).__name__, str(e)]
# classic modules
import jax.experimental.maps as maps
from jax.interpreters import pxla
out["maps_thread_resources_identity"] = maps.thread_resources is pxla.thread_resources
out["maps_dir"] = sorted(n for n in dir(maps) if not n.startswith("_"))
ns = {}
exec("from jax.experimental.maps import *", ns)
out["maps_star"] = sorted(n for n in ns if not n.startswith("_"))
out["find_spec_global_device_array"] = importlib.util.find_spec("jax.experimental.global_device_array") is not None
out["find_spec_loops"] = importlib.util.find_spec("jax.experimental.loops") is not None
out["hasattr_maps_xmap"] = hasattr(maps, "xmap")
out["pickle_tree_map"] = pickle.loads(pickle.dumps(jax.tree_map)) is jax.tree_map
out["pickle_shuffle"] = pickle.loads(pickle.dumps(jax.random.shuffle)) is jax.random.shuffle
out["shuffle_draw"] = np.asarray(jax.random.shuffle(jax.random.PRNGKey(1), jnp.arange(10))).tolist()
json.dump(out, sys.stdout, indent=1)
