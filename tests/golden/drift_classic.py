"""Records ``drift_jax_0.4.30.json``: classic pjit's behaviour where jax 0.10
drifted (``tests/test_classic_drift.py`` holds pmapkit to it).

    /tmp/j430/bin/python tests/golden/drift_classic.py > tests/golden/drift_jax_0.4.30.json
(a scratch venv with jax==0.4.30 jaxlib==0.4.30 "numpy<2"; not part of the suite)
"""
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.pjit import pjit  # noqa: E402


def value_dependent(x):
    if x.sum() > 0:
        return x + 1, type(x).__name__
    return x - 1, type(x).__name__


def error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


golden = {"jax": jax.__version__}
with jax.disable_jit():
    f = pjit(value_dependent)
    pos, neg = f(np.ones(3, np.float32)), f(-np.ones(3, np.float32))
    golden["disable_jit"] = [[pos[0].tolist(), pos[1]], [neg[0].tolist(), neg[1]]]
x = np.ones(4, np.float32)
compiled = pjit(lambda v: v + 1).lower(x).compile()
golden["aot_committed"] = [compiled(x)._committed for _ in range(2)]
golden["call_committed"] = pjit(lambda v: v + 1)(x)._committed
golden["big_int"] = error(lambda: pjit(lambda v: v + 1)(2 ** 40))
golden["big_endian"] = error(lambda: pjit(lambda v: v + 1)(np.ones(4, ">f4")))
print(json.dumps(golden, indent=1))
