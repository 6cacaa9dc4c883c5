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


def placed(out):
    return {"sharding": type(out.sharding).__name__,
            "devices": sorted(d.id for d in out.sharding.device_set),
            "committed": out._committed, "values": np.asarray(out).ravel().tolist()}


pm = jax.pmap(lambda v: v * 2)(np.arange(8.0, dtype=np.float32).reshape(8, 1))
golden["pmap_output"] = {
    "no_mesh": placed(pjit(lambda v: v + 1)(pm)),
    "one_device_pmap": placed(pjit(lambda v: v + 1)(
        jax.pmap(lambda v: v, devices=jax.devices()[3:4])(np.ones((1, 2), np.float32)))),
    "beside_committed": placed(pjit(lambda v, w: v + w)(
        pm, jax.device_put(np.ones((8, 1), np.float32), jax.devices()[2]))),
}
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402
with Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "b")):
    golden["pmap_output"]["onto_mesh"] = placed(
        pjit(lambda v: v + 1, in_shardings=P("a"), out_shardings=P("a"))(pm))
golden["pmap_sharding_given"] = {
    what: error(lambda: pjit(lambda v: v, **{what: pm.sharding}))
    for what in ("in_shardings", "out_shardings")}
print(json.dumps(golden, indent=1))
