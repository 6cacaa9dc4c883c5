"""Writes real_use_jax_0.4.30.json: what classic JAX 0.4.30 gives for the
classic internals real code reached (issue 48) that it still had, for
tests/test_legacy_real_use_served.py. Run with jax 0.4.30 in a scratch venv
(python3.11 -m venv V && V/bin/pip install "jax==0.4.30" "jaxlib==0.4.30"
"numpy<2" absl-py; JAX_PLATFORMS=cpu V/bin/python real_use_jax_0.4.30.py >
real_use_jax_0.4.30.json)."""
import collections
import json
import sys

import numpy as np
import jax
import jax.numpy as jnp
from jax._src import core, prng, tree_util
from jax._src import test_util as jtu
from jax.interpreters import batching, pxla

out = {"jax": jax.__version__}

Pair = collections.namedtuple("Pair", "a b")
S = "<s>"
trees = {"none": None, "list": [1, None, [None, 2]], "dict": {"a": None, "b": (None, 3)},
         "namedtuple": Pair(None, [None])}
out["_replace_nones"] = {k: repr(tree_util._replace_nones(S, t)) for k, t in trees.items()}

out["_default_tolerance"] = {str(np.dtype(k)): v for k, v in jtu._default_tolerance.items()
                             if str(np.dtype(k)) in ("float16", "float32", "float64", "int32",
                                                     "bool", "complex64", "bfloat16")}
out["default_tolerance_is_default"] = jtu.default_tolerance() == jtu._default_tolerance
out["device_under_test"] = jtu.device_under_test()
try:
    jtu.check_eq({"a": np.float32(1.0)}, {"a": np.float32(1.0)})
    out["check_eq_same"] = "ok"
except AssertionError:
    out["check_eq_same"] = "AssertionError"
try:
    jtu.check_eq([np.ones(2)], [np.zeros(2)])
    out["check_eq_differs"] = "ok"
except AssertionError:
    out["check_eq_differs"] = "AssertionError"


def aval(x):
    a = core.get_aval(x)
    return [list(a.shape), str(a.dtype), bool(a.weak_type)]


out["get_aval"] = {"array": aval(jnp.ones((2, 3))), "float": aval(1.0), "int": aval(3),
                   "numpy": aval(np.zeros(4, np.int16))}
out["get_aval_tracer"] = jax.jit(lambda x: jnp.zeros(0) if False else
                                 jnp.asarray(aval(x)[0]))(jnp.ones((5, 2))).tolist()

key = prng.seed_with_impl(prng.threefry_prng_impl, 42)
out["seed_with_impl"] = [str(key.dtype), np.asarray(jax.random.key_data(key)).tolist()]
out["definitely_equal"] = [core.definitely_equal(2, 2), core.definitely_equal(2, 3)]
out["not_mapped"] = repr(batching.not_mapped)

spec = pxla.ShardingSpec(sharding=(pxla.Unstacked(4), pxla.NoSharding()),
                         mesh_mapping=(pxla.ShardedAxis(0),))
out["spec_to_indices_unstacked"] = repr(pxla.spec_to_indices((4, 3), spec))
spec = pxla.ShardingSpec(sharding=(pxla.Chunked((2,)), pxla.NoSharding()),
                         mesh_mapping=(pxla.ShardedAxis(0),))
out["spec_to_indices_chunked"] = repr(pxla.spec_to_indices((4, 3), spec))

json.dump(out, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
