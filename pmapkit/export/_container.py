"""pmapkit's checked container around a ``jax.export`` payload.

jax.export's flatbuffer has no integrity check and says nothing about who
wrote it: most single-byte corruptions still parse and fail later, or compute
something else. The container makes every blob self-describing and
self-checking. Layout of version 2, the one written (integers little-endian)::

    offset 0   MAGIC (16 bytes)
    16         container format version      u16
    18         header length H               u32
    22         header: UTF-8 JSON, H bytes   (producer versions, payload
                                              length and CRC-32, summary)
    22+H       CRC-32 of bytes [0, 22+H)     u32  (guards the header)
    26+H       payload: jax.export bytes     (length and CRC-32 in header)

Version 1 (still read) has the same frame with SHA-256 in both places: a
32-byte digest after the header, ``payload.sha256`` (hex) in it.

The checksums are there to catch corruption (a bad disk, a truncated copy,
a flipped bit), not tampering: anyone can recompute either kind, so neither
proves who wrote a file (docs/export.md says so; load artifacts from sources
you trust). CRC-32 catches every error burst up to 32 bits and every one- and
two-bit error at these lengths, any other corruption but once in 2**32, and
truncation is caught by the recorded lengths before any checksum is taken.
It costs a fraction of SHA-256's time (a loaded artifact's payload is read
once, here, before anything is parsed).

Reading checks, in order: non-empty, magic, version, lengths (truncation or
trailing bytes), header checksum, the header against its schema
(``_header``: size, nesting, types, required fields, ranges), payload
checksum, calling convention supported by this jax; only then is the payload
parsed. Any failure is a ``DeserializationError`` that says which check
failed. There is no fallback to parsing unchecked bytes and no pickle.
"""
from __future__ import annotations

import json
import struct

import jax
import jaxlib
from jax import export as jax_export
# zlib-ng's CRC-32 is zlib's, bit for bit, computed by carry-less multiply
# folding: about 1.3 M instructions over a 2.6 MB payload where zlib's own
# table loop takes 10.1 M, on the caller's thread of every load.
from zlib_ng.zlib_ng import crc32 as _crc32

from pmapkit.export import _header
from pmapkit.export._errors import DeserializationError, fail as _fail

MAGIC = b"\x89PMAPKIT-EXP\r\n\x1a\n"
#: The container version this pmapkit writes, and the range it reads.
CONTAINER_VERSION = 2
SUPPORTED_CONTAINER_VERSIONS = (1, 2)

_PREAMBLE = struct.Struct("<HI")          # version, header length
_PREAMBLE_END = len(MAGIC) + _PREAMBLE.size
_CRC = struct.Struct("<I")


def _sha256(data):
    import hashlib  # version 1 only
    return hashlib.sha256(data)


def header_seal(version, head):
    """The checksum bytes that follow ``head`` (magic, preamble and header)
    in a container of ``version``."""
    if version == 1:
        return _sha256(head).digest()
    return _CRC.pack(_crc32(head))


def payload_checksum(version, payload):
    """``{field: value}``: the header's record of ``payload``'s checksum in a
    container of ``version``."""
    if version == 1:
        return {"sha256": _sha256(payload).hexdigest()}
    return {"crc32": _crc32(payload)}


def _seal_size(version):
    return 32 if version == 1 else _CRC.size


_CHECKSUM_NAME = {1: "SHA-256", 2: "CRC-32"}

__all__ = ["CONTAINER_VERSION", "DeserializationError", "MAGIC",
           "SUPPORTED_CONTAINER_VERSIONS", "Unpacked", "header_seal", "pack",
           "parse_payload", "payload_checksum", "producer_versions", "unpack"]


def _pmapkit_version():
    import pmapkit
    return pmapkit.__version__


def producer_versions(calling_convention_version):
    from pmapkit import _jax_private as jp  # the writer's only
    current, target = jp.stablehlo_versions()
    return {"pmapkit": _pmapkit_version(), "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "calling_convention_version": int(calling_convention_version),
            "stablehlo": current, "stablehlo_target": target}


def pack(payload, *, calling_convention_version, summary):
    """The container bytes around ``payload`` (jax.export's serialization)."""
    header = {
        "producer": producer_versions(calling_convention_version),
        "payload": {"format": _header.PAYLOAD_FORMAT, "length": len(payload),
                    **payload_checksum(CONTAINER_VERSION, payload)},
        "exported": summary,
    }
    _header.check_writable(header)
    header_bytes = json.dumps(header, sort_keys=True,
                              separators=(",", ":")).encode("utf-8")
    head = MAGIC + _PREAMBLE.pack(CONTAINER_VERSION, len(header_bytes)) + header_bytes
    return b"".join((head, header_seal(CONTAINER_VERSION, head), payload))


class Unpacked:
    """A checked container: its parsed header and the payload bytes."""

    __slots__ = ("header", "payload", "container_version")

    def __init__(self, header, payload, container_version):
        self.header = header
        self.payload = payload
        self.container_version = container_version


def unpack(data) -> Unpacked:
    """Check every layer of a blob; return its header and payload."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(
            "pmapkit.export.deserialize: 'data' must be bytes, bytearray or "
            f"memoryview (a serialized artifact), got {type(data).__name__}.")
    view = memoryview(data)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    view = view.cast("B")
    size = len(view)
    if size == 0:
        _fail("empty blob (0 bytes); expected a pmapkit export artifact.")
    head_len = min(size, len(MAGIC))
    if bytes(view[:head_len]) != MAGIC[:head_len]:
        _fail(f"bad magic: the blob starts with {bytes(view[:8])!r}..., not "
              f"with pmapkit's export header {MAGIC[:8]!r}.... It is not a "
              "pmapkit export artifact (a raw jax.export payload loads, "
              "unchecked, with pmapkit.export.from_jax("
              "jax.export.deserialize(blob))).")
    if size < _PREAMBLE_END:
        _fail(f"truncated at byte {size}: the preamble alone needs "
              f"{_PREAMBLE_END} bytes.")
    version, header_len = _PREAMBLE.unpack_from(view, len(MAGIC))
    low, high = SUPPORTED_CONTAINER_VERSIONS
    if not low <= version <= high:
        _fail(f"unsupported container version {version} — supported "
              f"{low}..{high} (this is pmapkit {_pmapkit_version()}).")
    if header_len > _header.MAX_HEADER_BYTES:
        _fail(f"header length {header_len} is implausible (at most "
              f"{_header.MAX_HEADER_BYTES}); the blob is corrupted.")
    header_end = _PREAMBLE_END + header_len
    payload_start = header_end + _seal_size(version)
    if size < payload_start:
        _fail(f"truncated at byte {size}: the header and its checksum end at "
              f"byte {payload_start}.")
    if header_seal(version, view[:header_end]) != bytes(view[header_end:payload_start]):
        _fail(f"header checksum mismatch: bytes 0..{header_end} do not match "
              f"their {_CHECKSUM_NAME[version]}; the header is corrupted.")
    header = _header.parse(view[_PREAMBLE_END:header_end], version)
    expected_len = header["payload"]["length"]
    present = size - payload_start
    if present < expected_len:
        _fail(f"truncated at byte {size}: the payload declares {expected_len} "
              f"bytes, only {present} are present.")
    if present > expected_len:
        _fail(f"{present - expected_len} unexpected bytes after the payload "
              f"(it declares {expected_len} bytes, ending at byte "
              f"{payload_start + expected_len}).")
    payload = view[payload_start:]
    # The one pass over the payload's bytes before jax.export parses it.
    (field, actual), = payload_checksum(version, payload).items()
    if actual != header["payload"][field]:
        _fail(f"payload checksum mismatch: {_CHECKSUM_NAME[version]} {actual}, "
              f"the header records {header['payload'][field]}; the payload is "
              "corrupted.")
    _check_calling_convention(header["producer"])
    return Unpacked(header, payload, version)


def _check_calling_convention(producer):
    version = producer["calling_convention_version"]
    low = jax_export.minimum_supported_calling_convention_version
    high = jax_export.maximum_supported_calling_convention_version
    if version > high:
        _fail(f"the artifact uses calling convention version {version} "
              f"(written by jax {producer['jax']}), newer than this jax "
              f"{jax.__version__} supports ({low}..{high}); upgrade jax to load it.")
    if version < low:
        _fail(f"the artifact uses calling convention version {version} "
              f"(written by jax {producer['jax']}), older than this jax "
              f"{jax.__version__} supports ({low}..{high}).")


def parse_payload(unpacked):
    """jax.export's Exported from a checked payload; a payload that still
    fails to parse (a crafted blob) is a DeserializationError too."""
    try:
        # flatbuffers reads any buffer; a memoryview avoids copying the payload.
        exported = jax_export.deserialize(unpacked.payload)
    except Exception as exc:  # noqa: BLE001 — any parse failure means a bad blob
        _fail(f"the payload passed its checksum but is not a valid jax.export "
              f"artifact ({type(exc).__name__}: {exc}).")
    summary = unpacked.header["exported"]
    recorded = unpacked.header["producer"]["calling_convention_version"]
    if exported.calling_convention_version != recorded:
        _fail(f"the header records calling convention version {recorded} but "
              f"the payload has {exported.calling_convention_version}.")
    for key, read in _PAYLOAD_RECORDS.items():
        if key in summary:
            value = read(exported, summary[key])
            if summary[key] != value:
                _fail(f"the header records {key}={summary[key]!r} but the payload "
                      f"has {value!r}.")
    # The module itself is parsed once, by the first call's compile (parsing
    # it here too would double a new process's load time); a module that
    # does not parse is reported then (``check_module_parses``).
    return exported


def _vjp_order(exported, recorded):
    """How many orders of VJP the payload holds, counted up to one past
    ``recorded`` (each order is a nested payload, deserialized to count it:
    only artifacts serialized with VJPs pay for it)."""
    order = 0
    while order <= recorded and exported.has_vjp():
        exported = exported.vjp()
        order += 1
    return order


#: Every field of the header's ``exported`` summary that the payload records
#: too, and how to read it there (``read(jax Exported, header value)``):
#: a header resealed to say otherwise is refused, never believed.
_PAYLOAD_RECORDS = {
    "fun_name": lambda e, _: e.fun_name,
    "nr_devices": lambda e, _: e.nr_devices,
    "platforms": lambda e, _: list(e.platforms),
    "strict_checks": lambda e, _: not e.disabled_safety_checks,
    "vjp_order": _vjp_order,
}


def check_module_parses(jax_exported, error):
    """After ``error`` in the first call of a loaded artifact: a
    DeserializationError (from ``error``) if its StableHLO module does not
    parse; otherwise returns, and the caller re-raises ``error``."""
    try:
        jax_exported.mlir_module()
    except Exception as exc:  # noqa: BLE001 — any parse failure means a bad blob
        raise DeserializationError(
            f"the payload's StableHLO module does not parse "
            f"({type(exc).__name__}: {str(exc)[:200]}).") from error
