"""Shared pieces of the export test modules (tests/test_export_*.py)."""
import contextlib
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export

from pmapkit import export as pe

N = 8  # devices (tests/conftest.py)


def pmapkit_checks():
    """The context for tracing pmapkit.pmap/pjit under an export: JAX's
    checks stay on (the suite's setting); pmapkit's typecheck rules must be
    registered for them to pass, which this asserts."""
    assert importlib.util.find_spec("pmapkit.core.rules.typecheck") is not None
    return contextlib.nullcontext()


def sds(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def values(shape, dtype=np.float32, seed=0):
    """Deterministic test values of any dtype."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def assert_tree_close(out, ref, tol=1e-5):
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    assert out_tree == ref_tree, (out_tree, ref_tree)
    for o, r in zip(out_leaves, ref_leaves):
        o, r = np.asarray(o), np.asarray(r)
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        if np.issubdtype(r.dtype, np.inexact) or r.dtype == jnp.bfloat16:
            np.testing.assert_allclose(o.astype(np.complex128 if np.iscomplexobj(r) else np.float64),
                                       r.astype(np.complex128 if np.iscomplexobj(r) else np.float64),
                                       rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(o, r)


class Impl:
    """export -> serialize -> deserialize -> call, by one implementation."""

    def __init__(self, name):
        self.name = name

    def export(self, fun, *specs, **kwspecs):
        if self.name == "jax":
            jitted = fun if isinstance(fun, jax.stages.Wrapped) else jax.jit(fun)
            return jax_export.export(jitted)(*specs, **kwspecs)
        return pe.export(fun)(*specs, **kwspecs)

    def round_trip(self, exported, vjp_order=0):
        if self.name == "jax":
            return jax_export.deserialize(exported.serialize(vjp_order=vjp_order))
        return pe.deserialize(pe.serialize(exported, vjp_order=vjp_order))

    def call(self, exported, *args, **kwargs):
        return exported.call(*args, **kwargs)

    def __repr__(self):
        return self.name


IMPLS = [Impl("jax"), Impl("pmapkit")]


# -- golden artifacts (tests/golden/) ----------------------------------------
# Written once by ``write_goldens`` with the pmapkit of the day (container
# version 1, jax 0.10.2); the suite only reads them, so an artifact written
# then must keep loading and computing the same values. Inputs are rebuilt
# here from fixed seeds; references are computed with numpy.
GOLDEN_DIR = "golden"


class GoldenCase:
    def __init__(self, fun, specs, kwspecs, args, kwargs, reference, vjp_order=0):
        self.fun, self.specs, self.kwspecs = fun, specs, kwspecs
        self.args, self.kwargs = args, kwargs
        self.reference, self.vjp_order = reference, vjp_order


def _mlp(x, params):
    for w, b in params:
        x = jnp.tanh(x @ w + b[None, :])
    return x


def _mlp_ref(x, params):
    for w, b in params:
        x = np.tanh(x @ w + b)
    return x


def golden_cases():
    """name -> GoldenCase (the functions need no pmapkit state)."""
    import pmapkit
    x = values((4, 3), seed=1)
    params = [(values((3, 5), seed=2), values((5,), seed=3)),
              (values((5, 2), seed=4), values((2,), seed=5))]
    ints = values((6,), np.int32, seed=6)
    flags = values((5,), np.bool_, seed=7)
    z = values((5,), np.complex64, seed=8)
    h = values((5,), jnp.bfloat16, seed=9)
    shards = values((N, 3), seed=10)

    def mixed(flags, z, h):
        return {"masked": jnp.where(flags, z, jnp.zeros_like(z)),
                "h2": h * h, "any": flags.any()}

    def normalize(v):
        return v / jax.lax.psum(v, "i")

    spec_tree = jax.tree_util.tree_map(lambda a: sds(a.shape), params)
    return {
        "mlp_f32_pytree": GoldenCase(
            _mlp, (sds((4, 3)), spec_tree), {}, (x, params), {},
            _mlp_ref(x, params), vjp_order=1),
        "int_kwargs": GoldenCase(
            lambda a, *, shift: (a << shift, a.sum()),
            (sds((6,), jnp.int32),), {"shift": sds((), jnp.int32)},
            (ints,), {"shift": np.int32(2)}, (ints << 2, ints.sum(dtype=np.int32))),
        "mixed_bool_complex_bf16": GoldenCase(
            mixed, (sds((5,), jnp.bool_), sds((5,), jnp.complex64),
                    sds((5,), jnp.bfloat16)), {}, (flags, z, h), {},
            {"masked": np.where(flags, z, 0).astype(np.complex64),
             "h2": (h * h), "any": np.bool_(flags.any())}),
        "poly_concat": GoldenCase(
            lambda v: jnp.concatenate([v, v * 2], axis=0),
            (pe.poly_spec((None, 3), jnp.float32, "b, ..."),), {}, (x,), {},
            np.concatenate([x, x * 2], axis=0)),
        "pmap_normalize_8dev": GoldenCase(
            pmapkit.pmap(normalize, axis_name="i"), (sds((N, 3)),), {},
            (shards,), {}, shards / shards.sum(axis=0)),
    }


def write_goldens(directory):
    """Regenerate the golden artifacts (only when the format deliberately
    gains a version: old files must stay as they are)."""
    import os
    for name, case in golden_cases().items():
        with pmapkit_checks():
            exported = pe.export(case.fun)(*case.specs, **case.kwspecs)
        blob = pe.serialize(exported, vjp_order=case.vjp_order)
        with open(os.path.join(directory, f"{name}.pmkx"), "wb") as f:
            f.write(blob)


# -- crafted artifacts ---------------------------------------------------------
def split_artifact(blob):
    """(header JSON text, payload bytes) of a pmapkit artifact (either
    container version)."""
    import struct
    from pmapkit.export import _container
    start = len(_container.MAGIC) + 6
    version, header_len = struct.unpack_from("<HI", blob, len(_container.MAGIC))
    header_end = start + header_len
    seal = 32 if version == 1 else 4
    return bytes(blob[start:header_end]).decode(), bytes(blob[header_end + seal:])


def seal(head, version=2):
    """The header checksum of a container of ``version`` (1: SHA-256;
    2: CRC-32, little-endian u32), computed here, not by pmapkit."""
    import hashlib
    import struct
    import zlib
    return hashlib.sha256(head).digest() if version == 1 else struct.pack("<I", zlib.crc32(head))


def payload_record(payload, version=2):
    """The header's ``payload`` checksum field for ``payload``."""
    import hashlib
    import zlib
    return ({"sha256": hashlib.sha256(payload).hexdigest()} if version == 1
            else {"crc32": zlib.crc32(payload)})


def reseal(header_text, payload, version=2):
    """A container around ``header_text`` (str or bytes, any content) and
    ``payload`` with a valid header checksum: what a crafted file looks like."""
    import struct
    from pmapkit.export import _container
    raw = header_text.encode() if isinstance(header_text, str) else bytes(header_text)
    head = _container.MAGIC + struct.pack("<HI", version, len(raw)) + raw
    return head + seal(head, version) + payload
