"""pmapkit's export container: layout, every rejection path, the golden
artifacts of earlier versions, a seeded corruption fuzz, and loading in a
fresh process."""
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

import pmapkit
from pmapkit import export as pe
from pmapkit.export import _container

from _export_helpers import (GOLDEN_DIR, assert_tree_close, golden_cases,
                             payload_record, pmapkit_checks, reseal, sds, seal,
                             values)

HERE = os.path.dirname(os.path.abspath(__file__))
PREAMBLE_END = len(_container.MAGIC) + 6


@pytest.fixture(scope="module")
def blob():
    exported = pe.export(lambda x, w: jnp.tanh(x @ w))(sds((2, 3)), sds((3, 2)))
    return pe.serialize(exported)


def _layout(blob):
    version, header_len = struct.unpack_from("<HI", blob, len(_container.MAGIC))
    header_end = PREAMBLE_END + header_len
    return version, header_end, header_end + (32 if version == 1 else 4)


def _edit_header(blob, edit, payload=None):
    version, header_end, payload_start = _layout(blob)
    header = json.loads(blob[PREAMBLE_END:header_end])
    edit(header)
    return reseal(json.dumps(header), blob[payload_start:] if payload is None else payload,
                  version)


def _as_version_1(blob):
    """``blob`` rewritten in container version 1 (what pmapkit wrote before
    version 2): SHA-256 of header and payload, built here by hand."""
    _, header_end, payload_start = _layout(blob)
    header = json.loads(blob[PREAMBLE_END:header_end])
    payload = blob[payload_start:]
    del header["payload"]["crc32"]
    header["payload"]["sha256"] = hashlib.sha256(payload).hexdigest()
    return reseal(json.dumps(header), payload, version=1)


def test_layout_and_header(blob):
    assert blob.startswith(_container.MAGIC)
    version, header_end, payload_start = _layout(blob)
    assert version == pe.CONTAINER_VERSION == 2
    # Version 2 seals the header with its CRC-32 (little-endian u32) and
    # records the payload's CRC-32 in it: no SHA-256 anywhere.
    assert payload_start - header_end == 4
    assert struct.pack("<I", zlib.crc32(blob[:header_end])) == blob[header_end:payload_start]
    header = json.loads(blob[PREAMBLE_END:header_end])
    payload = blob[payload_start:]
    assert header["payload"] == {"format": "jax.export", "length": len(payload),
                                 "crc32": zlib.crc32(payload)}
    producer = header["producer"]
    assert producer["pmapkit"] == pmapkit.__version__
    assert producer["jax"] == jax.__version__
    assert producer["jaxlib"]
    assert producer["calling_convention_version"] == \
        jax_export.maximum_supported_calling_convention_version
    assert producer["stablehlo"] and producer["stablehlo_target"]
    assert header["exported"]["nr_devices"] == 1
    # The payload is jax.export's own serialization, unchanged.
    assert jax_export.deserialize(bytearray(payload)).fun_name == "<lambda>"
    info = pe.artifact_info(blob)
    assert info["container_version"] == 2 and info["producer"] == producer


def test_deserialize_accepts_bytes_like(blob):
    spaced = np.zeros(2 * len(blob), np.uint8)
    spaced[::2] = np.frombuffer(bytes(blob), np.uint8)
    strided = spaced[::2]
    assert not memoryview(strided).c_contiguous
    for data in (blob, bytearray(blob), memoryview(blob), memoryview(strided)):
        assert pe.deserialize(data).in_avals[0].shape == (2, 3)


@pytest.mark.parametrize("data", ["text", None, 12, [1, 2]])
def test_deserialize_rejects_non_bytes(data):
    with pytest.raises(TypeError, match="'data' must be bytes"):
        pe.deserialize(data)


def test_error_is_a_value_error():
    assert issubclass(pe.DeserializationError, ValueError)


@pytest.mark.parametrize("make,match", [
    (lambda b: b"", "empty blob"),
    (lambda b: b"PK\x03\x04 a zip file", "bad magic"),
    (lambda b: bytes(b[:5]), "truncated at byte 5"),   # a prefix of the magic
    (lambda b: bytes(b[:PREAMBLE_END - 1]), f"truncated at byte {PREAMBLE_END - 1}"),
    (lambda b: bytes(b[:PREAMBLE_END + 10]), f"truncated at byte {PREAMBLE_END + 10}: "
                                             "the header and its checksum"),
    (lambda b: bytes(b[:-7]), "truncated at byte .*: the payload declares"),
    (lambda b: bytes(b) + b"\x00\x00\x00", "3 unexpected bytes after the payload"),
    (lambda b: bytes(b[:16]) + struct.pack("<H", 7) + bytes(b[18:]),
     "unsupported container version 7 — supported 1..2"),
    (lambda b: bytes(b[:16]) + struct.pack("<H", 1) + bytes(b[18:]),
     "header checksum mismatch"),  # a version-2 file claiming version 1
    (lambda b: bytes(b[:18]) + struct.pack("<I", 1 << 30) + bytes(b[22:]), "implausible"),
    (lambda b: bytes(b[:PREAMBLE_END + 3]) + b"X" + bytes(b[PREAMBLE_END + 4:]),
     "header checksum mismatch"),
    (lambda b: bytes(b[:-1]) + bytes([b[-1] ^ 0xFF]), "payload checksum mismatch"),
])
def test_rejections_say_what_is_wrong(blob, make, match):
    with pytest.raises(pe.DeserializationError, match=match):
        pe.deserialize(make(blob))


def test_version_1_files_still_load_and_are_checked(blob):
    # What pmapkit wrote before container version 2 (SHA-256 of header and
    # payload) loads, computes, and is still checked byte for byte.
    old = _as_version_1(bytes(blob))
    assert pe.artifact_info(old)["container_version"] == 1
    x, w = values((2, 3)), values((3, 2), seed=1)
    np.testing.assert_allclose(np.asarray(pe.deserialize(old).call(x, w)),
                               np.asarray(pe.deserialize(blob).call(x, w)), rtol=1e-6)
    _, header_end, payload_start = _layout(old)
    flipped_payload = old[:-1] + bytes([old[-1] ^ 0x01])
    with pytest.raises(pe.DeserializationError,
                       match="payload checksum mismatch: SHA-256 [0-9a-f]{64}"):
        pe.deserialize(flipped_payload)
    flipped_header = (old[:PREAMBLE_END + 3] + bytes([old[PREAMBLE_END + 3] ^ 0x01])
                      + old[PREAMBLE_END + 4:])
    with pytest.raises(pe.DeserializationError, match="header checksum mismatch.*SHA-256"):
        pe.deserialize(flipped_header)
    with pytest.raises(pe.DeserializationError, match="truncated"):
        pe.deserialize(old[:payload_start + 10])
    # Each version's header records its own checksum, and only that one.
    crc_in_v1 = _edit_header(old, lambda h: h["payload"].update(
        payload_record(old[payload_start:], version=2)))
    assert pe.deserialize(crc_in_v1).fun_name == "<lambda>"   # extra keys are ignored
    no_sha = _edit_header(crc_in_v1, lambda h: h["payload"].pop("sha256"))
    with pytest.raises(pe.DeserializationError, match=r"header\.payload\.sha256 is missing"):
        pe.deserialize(no_sha)
    sha_in_v2 = _edit_header(bytes(blob), lambda h: (
        h["payload"].pop("crc32"), h["payload"].update(payload_record(b"", version=1))))
    with pytest.raises(pe.DeserializationError, match=r"header\.payload\.crc32 is missing"):
        pe.deserialize(sha_in_v2)


def test_a_version_2_payload_is_read_once_and_never_hashed_with_sha256(blob, monkeypatch):
    # Loading takes one pass over the payload's bytes (its CRC-32) and no
    # SHA-256 at all: the cost of a load is jax.export's parse plus that pass.
    import hashlib as hashlib_module
    payload_len = len(blob) - _layout(blob)[2]
    passes = []
    real_crc32 = _container._crc32

    def counting_crc32(data, *rest):
        passes.append(len(memoryview(data).cast("B")))
        return real_crc32(data, *rest)

    def no_sha256(*args, **kwargs):
        raise AssertionError("SHA-256 taken while loading a version-2 artifact")

    monkeypatch.setattr(_container, "_crc32", counting_crc32)
    monkeypatch.setattr(hashlib_module, "sha256", no_sha256)
    loaded = pe.deserialize(blob)
    assert passes.count(payload_len) == 1, passes
    assert sum(passes) < payload_len + 4096, passes   # the header's pass is small
    assert loaded.fun_name == "<lambda>"


def test_the_container_crc_is_zlibs_at_every_length_and_offset():
    # The format is zlib's CRC-32 (artifacts written by earlier pmapkits, and
    # tests/_export_helpers.py's reseal, use the stdlib's); the fast one the
    # container computes it with folds 16- and 64-byte blocks and must agree
    # on every tail and start alignment, on bytes and on a memoryview slice.
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 9000, dtype=np.uint8).tobytes()
    view = memoryview(data)
    for length in [*range(0, 300), 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 8191]:
        for offset in (0, 1, 3, 7, 8, 15, 31):
            part = view[offset:offset + length]
            assert _container._crc32(part) == zlib.crc32(part), (length, offset)
    assert _container._crc32(bytearray(data)) == zlib.crc32(data)
    assert _container.payload_checksum(2, view[5:]) == {"crc32": zlib.crc32(view[5:])}


def test_raw_jax_blob_is_foreign_with_a_hint(blob):
    raw = bytes(jax_export.export(jax.jit(jnp.sin))(sds((3,))).serialize())
    with pytest.raises(pe.DeserializationError, match=r"bad magic.*from_jax"):
        pe.deserialize(raw)


def test_newer_calling_convention_names_both_versions(blob):
    newer = jax_export.maximum_supported_calling_convention_version + 5
    data = _edit_header(blob, lambda h: h["producer"].update(
        calling_convention_version=newer, jax="0.99.0"))
    low = jax_export.minimum_supported_calling_convention_version
    high = jax_export.maximum_supported_calling_convention_version
    with pytest.raises(pe.DeserializationError,
                       match=f"calling convention version {newer} \\(written by jax 0.99.0\\), "
                             f"newer than this jax {jax.__version__} supports \\({low}..{high}\\)"):
        pe.deserialize(data)
    older = _edit_header(blob, lambda h: h["producer"].update(calling_convention_version=1))
    with pytest.raises(pe.DeserializationError, match="older than this jax"):
        pe.deserialize(older)


def test_resealed_header_edits_are_still_caught(blob):
    # A header re-sealed with a valid digest (a crafted blob) is checked too.
    with pytest.raises(pe.DeserializationError, match="malformed header"):
        pe.deserialize(_edit_header(blob, lambda h: h.pop("payload")))
    with pytest.raises(pe.DeserializationError, match="unknown payload format"):
        pe.deserialize(_edit_header(blob, lambda h: h["payload"].update(format="pickle")))
    garbage = b"\x01" * 100

    def new_payload(h):
        h["payload"].update(length=len(garbage), **payload_record(garbage))

    with pytest.raises(pe.DeserializationError, match="not a valid jax.export artifact"):
        pe.deserialize(_edit_header(blob, new_payload, payload=garbage))


# Every field of the header's summary that the payload records too, resealed
# to say otherwise: (field, a value the payload of ``blob`` does not hold).
_RESEALED_SUMMARIES = [
    ("fun_name", "other"),
    ("nr_devices", 4),  # would otherwise load as a one-device artifact
    ("platforms", ["tpu"]),
    ("strict_checks", False),
    ("vjp_order", 1),
]


def test_resealed_summary_fields_are_checked_against_the_payload(blob):
    summary = json.loads(blob[PREAMBLE_END:_layout(blob)[1]])["exported"]
    # Every field the header summarizes is covered here.
    assert sorted(summary) == sorted(field for field, _ in _RESEALED_SUMMARIES)
    for field, value in _RESEALED_SUMMARIES:
        assert summary[field] != value
        crafted = _edit_header(blob, lambda h: h["exported"].update({field: value}))
        with pytest.raises(pe.DeserializationError,
                           match=re.escape(f"header records {field}={value!r} but the payload")):
            pe.deserialize(crafted)
    assert pe.deserialize(blob).nr_devices == 1


def test_resealed_vjp_order_is_checked_both_ways():
    exported = pe.export(jnp.sin)(sds((3,)))
    with_vjp = pe.serialize(exported, vjp_order=1)
    assert pe.deserialize(with_vjp).has_vjp()
    for claimed in (0, 2):
        crafted = _edit_header(with_vjp, lambda h: h["exported"].update(vjp_order=claimed))
        with pytest.raises(pe.DeserializationError,
                           match=f"records vjp_order={claimed} but the payload has 1"):
            pe.deserialize(crafted)


def test_no_pickle_anywhere():
    sources = [os.path.join(os.path.dirname(pe.__file__), f)
               for f in os.listdir(os.path.dirname(pe.__file__)) if f.endswith(".py")]
    for path in sources:
        with open(path) as f:
            text = f.read()
        assert "import pickle" not in text and "cloudpickle" not in text, path


# -- golden artifacts ---------------------------------------------------------
GOLDEN = sorted(golden_cases())
#: Each container version's golden artifacts: version 1 in ``golden/`` (the
#: first release's), version 2 in ``golden/container_v2/`` (CRC-32). Files
#: already written never change: this pmapkit must load every one of them.
GOLDEN_VERSIONS = {1: GOLDEN_DIR, 2: os.path.join(GOLDEN_DIR, "container_v2")}


@pytest.mark.parametrize("version", sorted(GOLDEN_VERSIONS))
def test_golden_files_present(version):
    folder = os.path.join(HERE, GOLDEN_VERSIONS[version])
    names = sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".pmkx"))
    assert names == GOLDEN


@pytest.mark.parametrize("version", sorted(GOLDEN_VERSIONS))
@pytest.mark.parametrize("name", GOLDEN)
def test_golden_artifact_loads_and_computes(name, version):
    case = golden_cases()[name]
    with open(os.path.join(HERE, GOLDEN_VERSIONS[version], f"{name}.pmkx"), "rb") as f:
        data = f.read()
    info = pe.artifact_info(data)
    assert info["container_version"] == version
    assert info["producer"]["jax"] == "0.10.2" and info["producer"]["pmapkit"] == "0.1.0"
    exported = pe.deserialize(data)
    # A multi-device artifact runs where its inputs are: on a mesh of its size.
    with pmapkit.Mesh(np.array(jax.devices()[:exported.nr_devices]), ("i",)):
        got = exported.call(*case.args, **case.kwargs)
    tol = 2e-2 if name.startswith("mixed") else 1e-5
    assert_tree_close(got, case.reference, tol)
    # A golden artifact matches what this pmapkit exports for the same function.
    with pmapkit_checks():
        fresh = pe.export(case.fun)(*case.specs, **case.kwspecs)
    # (symbolic dimensions of two exports live in different scopes: compare text)
    assert str(fresh.in_avals) == str(exported.in_avals)
    assert fresh.in_tree == exported.in_tree
    assert fresh.out_tree == exported.out_tree and fresh.nr_devices == exported.nr_devices
    if case.vjp_order:
        assert exported.has_vjp()
        grads = jax.grad(lambda *a: jnp.sum(exported.call(*a)))(*case.args)
        assert np.all(np.isfinite(np.asarray(grads)))


# -- corruption fuzz ---------------------------------------------------------
FUZZ_SEED = 20261123


def _corruptions(blob, rng):
    """(kind, corrupted blob) — 1,200 of them, all different from ``blob``."""
    n = len(blob)
    out = []
    for _ in range(400):                       # single bit flips
        i, bit = int(rng.integers(n)), int(rng.integers(8))
        b = bytearray(blob)
        b[i] ^= 1 << bit
        out.append(("bit flip", bytes(b)))
    for _ in range(300):                       # byte flips to another value
        i = int(rng.integers(n))
        b = bytearray(blob)
        b[i] = (b[i] + int(rng.integers(1, 256))) % 256
        out.append(("byte flip", bytes(b)))
    for _ in range(200):                       # truncations
        out.append(("truncation", blob[:int(rng.integers(n))]))
    for _ in range(200):                       # insertions of 1..16 random bytes
        i = int(rng.integers(n + 1))
        extra = rng.integers(0, 256, size=int(rng.integers(1, 17)), dtype=np.uint8).tobytes()
        out.append(("insertion", blob[:i] + extra + blob[i:]))
    for _ in range(100):                       # random blobs, some with our magic
        body = rng.integers(0, 256, size=int(rng.integers(0, 2 * n)), dtype=np.uint8).tobytes()
        if rng.random() < 0.5:
            body = _container.MAGIC + body
        out.append(("random bytes", body))
    return [(k, b) for k, b in out if b != blob]


_REASONS = ("empty blob", "bad magic", "truncated", "unexpected bytes",
            "unsupported container version", "implausible", "header checksum",
            "payload checksum")


def test_fuzz_every_corruption_raises_deserialization_error(blob, monkeypatch):
    parsed = []
    real = _container.jax_export.deserialize
    monkeypatch.setattr(_container.jax_export, "deserialize",
                        lambda data: parsed.append(1) or real(data))
    rng = np.random.default_rng(FUZZ_SEED)
    cases = _corruptions(bytes(blob), rng)
    assert len(cases) >= 1000
    counts, reasons = {}, {}
    for kind, data in cases:
        with pytest.raises(pe.DeserializationError) as info:
            pe.deserialize(data)
        counts[kind] = counts.get(kind, 0) + 1
        reason = next((r for r in _REASONS if r in str(info.value)), "other")
        reasons[reason] = reasons.get(reason, 0) + 1
    print(f"\nexport fuzz: {len(cases)} corrupted blobs, all rejected; by kind "
          f"{counts}; by reason {reasons}")
    assert sum(counts.values()) == len(cases)
    assert not parsed   # no corrupted payload ever reached jax.export's parser


# -- a fresh process ------------------------------------------------------------
def test_load_and_call_in_a_fresh_process(tmp_path):
    f = lambda x, w: {"y": jnp.tanh(x @ w)}  # noqa: E731
    x, w = values((2, 3)), values((3, 4), seed=1)
    path = tmp_path / "mlp.pmkx"
    path.write_bytes(pe.serialize(pe.export(f)(sds((2, 3)), sds((3, 4))), vjp_order=1))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    script = textwrap.dedent(f"""
        import jax, jax.numpy as jnp, numpy as np
        from pmapkit import export
        exp = export.deserialize(open({str(path)!r}, "rb").read())
        x, w = np.load({str(tmp_path / 'x.npy')!r}), np.load({str(tmp_path / 'w.npy')!r})
        np.save({str(tmp_path / 'y.npy')!r}, np.asarray(exp.call(x, w)["y"]))
        g = jax.grad(lambda x: jnp.sum(exp.call(x, w)["y"]))(x)
        np.save({str(tmp_path / 'g.npy')!r}, np.asarray(g))
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-P", "-c", script], check=True, env=env,
                   cwd=str(tmp_path), timeout=300)
    assert_tree_close(np.load(tmp_path / "y.npy"), np.tanh(x @ w), tol=1e-6)
    want = jax.grad(lambda x: jnp.sum(f(x, w)["y"]))(x)
    assert_tree_close(np.load(tmp_path / "g.npy"), want, tol=1e-5)
