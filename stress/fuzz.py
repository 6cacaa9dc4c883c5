"""Fuzzed export artifacts: corrupted, truncated and crafted blobs.

Three artifacts (a plain function, a pmap over 8 devices, a pjit on an
8-device mesh) are serialized, then each probe derives one mutant from a
seeded generator and loads it:

  flip          1-4 random bytes XORed anywhere; checksums left as they are
  truncate      cut at a random length
  header        the JSON header edited (a key dropped, renamed or added, a
                value of another type or range, deep nesting, a duplicate
                key, NaN), checksums recomputed
  header-bytes  1-3 random bytes of the header text XORed, checksums recomputed
  payload       1-4 random bytes of jax.export's payload XORed (or the payload
                cut), its length and SHA-256 and the header digest recomputed

Every rejection must be an ``export.DeserializationError``. Each mutant is
written to the worker's directory first; the pass keeps those of the probes
that are not clean (``--artifacts``), to load again by hand (the payload
holds source locations of the exporting call, so re-exporting elsewhere
gives other bytes). A mutant that
loads must compute what the original did (a harmless edit: a version string,
an unknown key); anything else it does — an exception at the call, another
result — is reported. No mutant may crash or hang the process.
"""
from __future__ import annotations

import copy
import hashlib
import json
import zlib

from stress import artifacts as art
from stress.common import Result, Wrong, jax, np, pe
from stress.probes import Unclear

SECTION = "fuzz"
KINDS = ("plain", "pmap", "pjit")
#: Share of the mutants per family.
FAMILIES = (("flip", 0.36), ("truncate", 0.12), ("header", 0.24),
            ("header-bytes", 0.14), ("payload", 0.14))
TOTAL = {"quick": 400, "full": 4200}

_ODD_VALUES = (None, True, False, 0, -1, 1, 2**31, 2**63, 10**30, 1.5, -0.0, "", "x",
               "x" * 5000, "\u0000", [], [1], {}, {"a": 1}, [[[[]]]])


def _rng(family, kind, index):
    return np.random.default_rng(zlib.crc32(f"{family}/{kind}/{index}".encode()))


def _flip_bytes(data, rng, count, start=0, end=None):
    data = bytearray(data)
    end = len(data) if end is None else end
    if end <= start:
        return bytes(data)
    for _ in range(count):
        at = int(rng.integers(start, end))
        data[at] ^= int(rng.integers(1, 256))
    return bytes(data)


# -- the families -----------------------------------------------------------------------
def _flip(blob, rng):
    return _flip_bytes(blob, rng, int(rng.integers(1, 5))), "flipped bytes"


def _truncate(blob, rng):
    cut = int(rng.integers(0, len(blob)))
    return blob[:cut], f"cut at {cut} of {len(blob)}"


def _paths(node, prefix=()):
    """Every (path, value) in a JSON tree."""
    yield prefix, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


def _header(blob, rng):
    version, header, payload = art.split(blob)
    header = copy.deepcopy(header)
    paths = [p for p, _ in _paths(header) if p]
    path = paths[int(rng.integers(len(paths)))]
    parent = header
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    edit = int(rng.integers(8))
    raw = None
    if edit == 0 and isinstance(parent, dict):
        del parent[last]
        what = f"dropped {'.'.join(map(str, path))}"
    elif edit == 1 and isinstance(parent, dict):
        parent[f"{last}_renamed"] = parent.pop(last)
        what = f"renamed {'.'.join(map(str, path))}"
    elif edit == 2:
        value = _ODD_VALUES[int(rng.integers(len(_ODD_VALUES)))]
        parent[last] = copy.deepcopy(value)
        what = f"{'.'.join(map(str, path))} = {json.dumps(value)[:40]}"
    elif edit == 3 and isinstance(parent, dict):
        parent[f"unknown_{int(rng.integers(1000))}"] = "added"
        what = f"added a key next to {'.'.join(map(str, path))}"
    elif edit == 4:
        depth = int(rng.choice([8, 15, 17, 100, 10000]))
        parent[last] = json.loads("[" * depth + "]" * depth) if depth < 500 else None
        if depth >= 500:
            raw = art.dump(header).replace(b"null", b"[" * depth + b"]" * depth, 1)
        what = f"{'.'.join(map(str, path))} nested {depth} deep"
    elif edit == 5 and isinstance(parent[last], (int, float)) and not isinstance(
            parent[last], bool):
        delta = int(rng.choice([-1, 1, 2**32]))
        parent[last] = parent[last] + delta
        what = f"{'.'.join(map(str, path))} {delta:+d}"
    elif edit == 6:
        text = art.dump(header)
        key = json.dumps(str(path[0])).encode() + b":"
        raw = text.replace(key, key + b"0," + key, 1)
        what = f"duplicate key {path[0]!r}"
    else:
        text = art.dump(header)
        raw = text.replace(b":0", b":NaN", 1) if b":0" in text else text + b" "
        what = "NaN or trailing space"
    return art.seal(raw if raw is not None else art.dump(header), payload, version), what


def _header_bytes(blob, rng):
    version, header, payload = art.split(blob)
    text = _flip_bytes(art.dump(header), rng, int(rng.integers(1, 4)))
    return art.seal(text, payload, version), "flipped header bytes"


def _payload(blob, rng):
    version, header, payload = art.split(blob)
    payload = bytes(payload)
    if rng.random() < 0.2:
        cut = int(rng.integers(0, len(payload)))
        new, what = payload[:cut], f"payload cut at {cut} of {len(payload)}"
    else:
        new, what = _flip_bytes(payload, rng, int(rng.integers(1, 5))), "flipped payload bytes"
    return art.seal(None, new, version, fix_payload_digest=copy.deepcopy(header)), what


MUTATE = {"flip": _flip, "truncate": _truncate, "header": _header,
          "header-bytes": _header_bytes, "payload": _payload}


# -- one probe -----------------------------------------------------------------------------
def mutant_file(family, kind, index):
    return f"mutant-{family}-{kind}-{index}.pmkx"


def mutant_of(probe_name):
    """The file name the mutant of fuzz probe ``family/kind/index`` is saved as."""
    family, kind, index = probe_name.split("/")
    return mutant_file(family, kind, index)



def _probe(family, kind, index):
    def body():
        blob, args, expected = art.artifacts()[kind]
        mutant, what = MUTATE[family](blob, _rng(family, kind, index))
        if mutant == blob:
            return Result(f"unchanged ({what})")
        # In the worker's directory: the pass keeps the mutants of probes
        # that are not clean (a crash leaves no other trace of the bytes).
        with open(mutant_file(family, kind, index), "wb") as f:
            f.write(mutant)
        digest = hashlib.sha256(mutant).hexdigest()[:12]
        try:
            loaded = pe.deserialize(mutant)
        except pe.DeserializationError as exc:
            return Result(f"DeserializationError: {str(exc)[:160]}", mutation=what,
                          sha=digest)
        except Exception as exc:  # noqa: BLE001 — the outcome to report
            raise Unclear(f"{what}: deserialize raised {type(exc).__name__}: "
                          f"{str(exc)[:300]}") from None
        try:
            out = jax.block_until_ready(loaded.call(*args))
        except Exception as exc:  # noqa: BLE001
            raise Unclear(f"{what}: loaded, then the call raised {type(exc).__name__}: "
                          f"{str(exc)[:300]}") from None
        if not np.allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5):
            raise Wrong(f"{what}: loaded and returned "
                        f"{np.asarray(out).ravel()[:4].tolist()}, expected "
                        f"{np.asarray(expected).ravel()[:4].tolist()}")
        return Result(f"loaded, correct result ({what})", mutation=what, sha=digest)
    return body


def register(reg):
    total = TOTAL[reg.mode]
    for family, share in FAMILIES:
        add = reg.section(SECTION, family, expect=(pe.DeserializationError,), timeout=60)
        for index in range(round(total * share)):
            kind = KINDS[index % len(KINDS)]
            add(f"{kind}/{index}", _probe(family, kind, index))
