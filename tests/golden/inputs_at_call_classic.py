"""Records ``inputs_at_call_jax_0.4.30.json``: how many of N calls of classic
jax.jit and jax.pmap computed a value other than the numpy input's value at
the call, the input being overwritten right after each call returns (the
probe of ``tests/test_inputs_at_call.py``).

Run with classic JAX in a scratch venv (not part of the suite):

    python3 -m venv /tmp/j430
    /tmp/j430/bin/pip install "jax==0.4.30" "jaxlib==0.4.30" "numpy<2"
    /tmp/j430/bin/python tests/golden/inputs_at_call_classic.py > tests/golden/inputs_at_call_jax_0.4.30.json
"""
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

CALLS = 50
busy = jax.jit(lambda m: jnp.linalg.matrix_power(m, 24))


def aligned(rows, cols):
    nbytes = rows * cols * 4
    buf = np.empty(nbytes + 64, np.uint8)
    start = (-buf.ctypes.data) % 64
    return buf[start:start + nbytes].view(np.float32).reshape(rows, cols)


def wrong_results(call, x, devices):
    slow = [jax.device_put(np.eye(128, dtype=np.float32) * 0.5, d) for d in devices]
    wrong = 0
    for _ in range(CALLS):
        x[...] = 1.0
        for m in slow:
            busy(m)
        y = call(x)
        x[...] = 99.0
        wrong += int(not np.all(np.asarray(y) == 2.0))
    return wrong


rows = []
for ndev in (1, 8):
    devices = jax.devices()[:ndev]
    for cols in (16, 1 << 18):
        for api, call in (("jax.jit", jax.jit(lambda v: v * 2.0)),
                          ("jax.pmap", jax.pmap(lambda v: v * 2.0, devices=devices))):
            rows.append({"api": api, "devices": ndev, "row_bytes": cols * 4,
                         "calls": CALLS,
                         "wrong": wrong_results(call, aligned(ndev, cols), devices)})
print(json.dumps({"jax": jax.__version__, "rows": rows}, indent=1))
