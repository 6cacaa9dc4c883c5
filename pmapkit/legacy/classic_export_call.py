"""JAX's own ``jax.export`` call reading its host inputs at the call.

Classic programs call ``jax.export.Exported.call`` too (jax 0.4.30 had
``jax.export``). There an eager CPU call ran before it returned, so a numpy
input rewritten right after the call did not change its result; jax 0.10
dispatches asynchronously and puts an aligned numpy array on the CPU without
a copy. Under ``pmapkit run`` (the classic layer, ``install()``), JAX's call
copies its numpy inputs first, as pmapkit's own export call does
(``pmapkit.export._call``). Kept apart from ``pmapkit.export``, whose import
``install()`` would otherwise pay in every process of a run.
"""
from __future__ import annotations

import functools

import jax
import numpy as np
from jax import export as jax_export

_MARK = "_pmapkit_reads_inputs_at_call"


def _snapshot(x):
    return x.copy() if type(x) is np.ndarray else x


def read_inputs_at_call() -> bool:
    """Make ``jax.export.Exported.call`` read numpy inputs at the call (once
    per process); True when this call made it so."""
    original = jax_export.Exported.call
    if getattr(original, _MARK, False):
        return False

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        args, kwargs = jax.tree_util.tree_map(_snapshot, (args, kwargs))
        return original(self, *args, **kwargs)

    setattr(call, _MARK, True)
    jax_export.Exported.call = call
    return True
