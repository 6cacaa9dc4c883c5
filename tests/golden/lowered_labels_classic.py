"""Records ``lowered_labels_jax_0.4.30.json``: the result labels of classic
``jax.pmap`` / ``pjit`` lowerings on the cases of
``tests/_lowered_label_cases.py``.

Run with classic JAX in a scratch venv (not part of the suite), from the
checkout:

    python3 -m venv /tmp/j430
    /tmp/j430/bin/pip install "jax==0.4.30" "jaxlib==0.4.30" "numpy<2"
    PYTHONPATH=tests /tmp/j430/bin/python tests/golden/lowered_labels_classic.py > tests/golden/lowered_labels_jax_0.4.30.json
"""
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.pjit import pjit  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import _lowered_label_cases  # noqa: E402

mesh = Mesh(np.array(jax.devices()), ("x",))
print(json.dumps({"jax": jax.__version__,
                  "labels": _lowered_label_cases.run_all(jax.pmap, pjit, mesh)},
                 indent=1, sort_keys=True))
