"""Records ``axis_names_jax_0.4.30.json``: classic ``jax.pmap`` on the cases
and classic ``pjit`` on the cases of ``tests/_axis_name_cases.py`` (axis
names that are not strings).

Run with classic JAX in a scratch venv (not part of the suite), from the
checkout:

    python3 -m venv /tmp/j430
    /tmp/j430/bin/pip install "jax==0.4.30" "jaxlib==0.4.30" "numpy<2"
    PYTHONPATH=tests /tmp/j430/bin/python tests/golden/axis_names_classic.py > tests/golden/axis_names_jax_0.4.30.json
"""
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402

from jax.experimental.pjit import pjit  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import _axis_name_cases  # noqa: E402

print(json.dumps({"jax": jax.__version__,
                  "cases": _axis_name_cases.run_all(jax.pmap),
                  "pjit_cases": _axis_name_cases.run_pjit_cases(
                      pjit, Mesh, jax.lax.with_sharding_constraint, jax.devices())},
                 indent=1, sort_keys=True))
