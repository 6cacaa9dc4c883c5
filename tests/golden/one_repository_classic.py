"""Records what jax 0.4.30 does with the classic names issue 56 serves, for
``tests/test_legacy_one_repository.py``:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        /work/venv-jax0430/bin/python tests/golden/one_repository_classic.py \
        > tests/golden/one_repository_jax_0.4.30.json

Names 0.4.30 no longer had (``jax.interpreters.pxla.axis_index``,
``jax._src.util.prod``) are recorded through what they were then
(``jax.lax.axis_index``; ``prod`` has no 0.4.30 record)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import util
from jax.ad_checkpoint import checkpoint

out = {"jax": jax.__version__}

x = np.linspace(-1.0, 1.0, 8, dtype=np.float32)


def f(v):
    return jnp.sum(jnp.sin(v) * jnp.cos(v) ** 2)


out["checkpoint_grad"] = np.asarray(jax.grad(checkpoint(f))(x)).tolist()
out["checkpoint_policy_grad"] = np.asarray(jax.grad(checkpoint(
    f, policy=jax.checkpoint_policies.nothing_saveable))(x)).tolist()
out["axis_index"] = np.asarray(jax.pmap(lambda v: lax.axis_index("i") + 0 * v,
                                        axis_name="i")(x)).tolist()

a = np.arange(8 * 2 * 3, dtype=np.float32).reshape(8, 2, 3) / 10
b = np.arange(8 * 3 * 4, dtype=np.float32).reshape(8, 3, 4) / 10
pdot = jax.pmap(lambda p, q: lax.pdot(p, q, "i", pos_contract=((1,), (0,))), axis_name="i")
out["pdot"] = np.asarray(pdot(a, b)).tolist()
out["pdot_grad"] = np.asarray(jax.pmap(jax.grad(
    lambda p, q: jnp.sum(lax.pdot(p, q, "i", pos_contract=((1,), (0,))) ** 2)),
    axis_name="i")(a, b)).tolist()
batched = jax.pmap(lambda p, q: lax.pdot(p, q, "i", pos_contract=((2,), (1,)),
                                         pos_batch=((0,), (0,))), axis_name="i")
out["pdot_batch"] = np.asarray(batched(a.reshape(8, 1, 2, 3), b.reshape(8, 1, 3, 4))).tolist()

out["safe_map"] = util.safe_map(lambda p, q: p * q, [1, 2, 3], [4, 5, 6])
out["safe_zip"] = [list(t) for t in util.safe_zip([1, 2], ["a", "b"])]
out["unzip2"] = [list(t) for t in util.unzip2([(1, "a"), (2, "b"), (3, "c")])]
out["unzip2_empty"] = [list(t) for t in util.unzip2([])]
for name, call in (("safe_map_error", lambda: util.safe_map(lambda p, q: p, [1, 2], [1])),
                   ("safe_zip_error", lambda: util.safe_zip([1, 2], [1]))):
    try:
        call()
        out[name] = None
    except Exception as e:      # the classic error, as recorded
        out[name] = [type(e).__name__, str(e)]
print(json.dumps(out))
