"""Export artifacts for the export probes and the fuzzer, and the container
layout (``pmapkit/export/_container.py``) to craft blobs with valid checksums.

    MAGIC (16) | version u16 | header length u32 | header JSON | CRC-32 of
    all before (u32) | payload (jax.export bytes; length and CRC-32 in the header)

Container version 1 (still read) seals with SHA-256 instead: 32 bytes after
the header, ``payload.sha256`` (hex) in it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import struct
import zlib

from stress.common import P, jax, jnp, mesh1d, np, pe, pmapkit

MAGIC_LEN = 16
PREAMBLE = struct.Struct("<HI")
PREAMBLE_END = MAGIC_LEN + PREAMBLE.size
CRC = struct.Struct("<I")


def digest_size(version):
    return 32 if version == 1 else CRC.size


def header_seal(head, version):
    return hashlib.sha256(head).digest() if version == 1 else CRC.pack(zlib.crc32(head))


def record_payload(header, payload, version):
    """Write ``payload``'s checksum into ``header`` as ``version`` records it."""
    if version == 1:
        header["payload"]["sha256"] = hashlib.sha256(payload).hexdigest()
    else:
        header["payload"]["crc32"] = zlib.crc32(payload)


def _plain(x, w):
    return jnp.tanh(x @ w) + 1


def _mapped(x):
    return x * 2 + jax.lax.psum(x, "i")


def _sharded(x):
    return jnp.sin(x) * 3


@functools.cache
def artifacts():
    """``{kind: (blob, args, expected)}`` for a plain, a pmap and a pjit export."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    w = np.ones((3, 2), np.float32)
    plain = pe.export(_plain)(jax.ShapeDtypeStruct(x.shape, x.dtype),
                              jax.ShapeDtypeStruct(w.shape, w.dtype))
    xm = np.arange(8, dtype=np.float32)
    mapped = pe.export(pmapkit.pmap(_mapped, "i"))(jax.ShapeDtypeStruct(xm.shape, xm.dtype))
    xs = np.arange(16, dtype=np.float32)
    with mesh1d():
        sharded = pe.export(pmapkit.pjit(_sharded, P("x"), P("x")))(
            jax.ShapeDtypeStruct(xs.shape, xs.dtype))
    return {
        "plain": (pe.serialize(plain), (x, w), np.tanh(x @ w) + 1),
        "pmap": (pe.serialize(mapped), (xm,), xm * 2 + xm.sum()),
        "pjit": (pe.serialize(sharded), (xs,), np.sin(xs) * 3),
    }


def poly_artifact():
    """An artifact of ``x -> x * 2`` for any batch size ("b, 3")."""
    spec = pe.poly_spec((None, 3), jnp.float32, "b, 3")
    return pe.serialize(pe.export(lambda v: v * 2)(spec))


def split(blob):
    """``(version, header dict, payload bytes)`` of a well-formed blob."""
    version, header_len = PREAMBLE.unpack_from(blob, MAGIC_LEN)
    header_end = PREAMBLE_END + header_len
    header = json.loads(blob[PREAMBLE_END:header_end])
    return version, header, blob[header_end + digest_size(version):]


def seal(header_bytes, payload, version=2, header_len=None, fix_payload_digest=None):
    """A blob with these header bytes and payload and a valid header checksum.

    With ``fix_payload_digest`` (a header dict), the payload's length and
    checksum are written into that header first (and it is serialized)."""
    if fix_payload_digest is not None:
        header = fix_payload_digest
        header["payload"]["length"] = len(payload)
        record_payload(header, payload, version)
        header_bytes = dump(header)
    size = len(header_bytes) if header_len is None else header_len
    head = bytes(pe_magic()) + PREAMBLE.pack(version, size) + header_bytes
    return head + header_seal(head, version) + payload


def dump(header):
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode()


def pe_magic():
    """The container's magic, as every artifact starts."""
    return artifacts()["plain"][0][:MAGIC_LEN]
