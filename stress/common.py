"""What probe bodies share: the libraries, inputs, meshes, checks.

Importing this module touches no device: the parent imports it to list the
probes, only workers (8 simulated CPU devices) run them.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit import export as pe
from pmapkit import host_callback as hcb

from stress.probes import Result, Wrong

__all__ = ["jax", "jnp", "np", "pmapkit", "pe", "hcb", "P", "NamedSharding",
           "Result", "Wrong", "x8", "mesh1d", "mesh2d", "check_equal", "summarize",
           "rss_mib", "devices", "ident", "double"]


def devices():
    return jax.devices()


def x8(*tail, dtype=np.float32, n=8):
    """A host array of leading size ``n`` (one slice per device)."""
    size = n * int(np.prod(tail, dtype=np.int64))
    return np.arange(size).reshape((n, *tail)).astype(dtype)


def mesh1d(n=8, name="x"):
    return pmapkit.Mesh(np.array(jax.devices()[:n]), (name,))


def mesh2d():
    return pmapkit.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))


def ident(x):
    return x


def double(x):
    return x * 2


def summarize(value, limit=160):
    """A short description of a probe's return value."""
    if isinstance(value, (jax.Array, np.ndarray)):
        text = f"{type(value).__name__} {value.dtype}{list(value.shape)}"
        try:
            text += f" = {np.asarray(value).ravel()[:6].tolist()}"
        except Exception as exc:  # noqa: BLE001 — a deleted array, say
            text += f" (unreadable: {type(exc).__name__})"
        return text
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_equal(out, ref, what="result"):
    """Raise Wrong unless ``out`` equals ``ref`` (pytrees of arrays and
    scalars; shapes, values and, for arrays, dtype kinds compared)."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    if out_tree != ref_tree:
        raise Wrong(f"{what} has structure {out_tree}, expected {ref_tree}: "
                    f"{summarize(out)}")
    for k, (o, r) in enumerate(zip(out_leaves, ref_leaves)):
        o_arr, r_arr = np.asarray(o), np.asarray(r)
        if o_arr.shape != r_arr.shape:
            raise Wrong(f"{what} leaf {k} has shape {o_arr.shape}, expected "
                        f"{r_arr.shape}: {summarize(o)}")
        if o_arr.dtype.kind != r_arr.dtype.kind:
            raise Wrong(f"{what} leaf {k} has dtype {o_arr.dtype}, expected "
                        f"{r_arr.dtype}")
        equal = (np.array_equal(o_arr, r_arr) if o_arr.dtype.kind in "biuUSO"
                 else np.allclose(o_arr, r_arr, rtol=1e-5, atol=1e-5, equal_nan=True))
        if not equal:
            raise Wrong(f"{what} leaf {k} differs from the reference: got "
                        f"{o_arr.ravel()[:6].tolist()}, expected "
                        f"{r_arr.ravel()[:6].tolist()}")


def rss_mib():
    """This process's resident set size now, in MiB."""
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")
