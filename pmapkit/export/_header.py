"""The container header: its schema, and reading it from untrusted bytes.

The header is JSON, sealed by a checksum (CRC-32; SHA-256 in container
version 1) — but a checksum only proves the bytes were not changed after
sealing, not that whoever sealed them wrote a sane header (a crafted file,
or a bug in a writer). So nothing in it is used
before it is checked here, in this order: size, UTF-8, nesting depth (counted
before the JSON parser runs, so a deeply nested header cannot exhaust the
parser's recursion), JSON without NaN/Infinity or duplicate keys, then every
field's presence, type and range. Every failure is a ``DeserializationError``.

Keys the schema does not name are ignored (a later pmapkit may add summary
fields to container version 1); the size and depth bounds cover them too.
"""
from __future__ import annotations

import json
import re

from pmapkit.export._errors import DeserializationError, fail

#: Headers are a few hundred bytes; anything past this is not ours.
MAX_HEADER_BYTES = 64 * 1024
#: Ours nest three deep (header -> exported -> platforms).
MAX_NESTING_DEPTH = 16

PAYLOAD_FORMAT = "jax.export"

# Patterns are compiled when first used (``re``'s cache): loading an
# artifact of the current version needs none of them.
_STRING = r'"(?:[^"\\]|\\.)*"'
_BRACKET = r"[\[\]{}]"
_SHA256_HEX = r"[0-9a-f]{64}"


# -- field types -----------------------------------------------------------------
class _Str:
    def __init__(self, max_len, pattern=None, min_len=1):
        self.max_len, self.pattern, self.min_len = max_len, pattern, min_len

    def check(self, value, where):
        if not isinstance(value, str):
            fail(f"malformed header: {where} must be a string, got {_kind(value)}.")
        if not self.min_len <= len(value) <= self.max_len:
            size = (f"exactly {self.max_len}" if self.min_len == self.max_len
                    else f"{self.min_len}..{self.max_len}")
            fail(f"malformed header: {where} must be a string of {size} "
                 f"characters, got {len(value)}.")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            fail(f"malformed header: {where} = {value[:80]!r} is not "
                 f"{self.pattern}.")


class _Int:
    def __init__(self, low, high):
        self.low, self.high = low, high

    def check(self, value, where):
        # bool is an int to Python, never to the schema.
        if not isinstance(value, int) or isinstance(value, bool):
            fail(f"malformed header: {where} must be an integer, got {_kind(value)}.")
        if not self.low <= value <= self.high:
            fail(f"malformed header: {where} = {value} is out of range "
                 f"[{self.low}, {self.high}].")


class _Bool:
    def check(self, value, where):
        if not isinstance(value, bool):
            fail(f"malformed header: {where} must be true or false, got {_kind(value)}.")


class _List:
    def __init__(self, item, max_len):
        self.item, self.max_len = item, max_len

    def check(self, value, where):
        if not isinstance(value, list):
            fail(f"malformed header: {where} must be a list, got {_kind(value)}.")
        if not 0 < len(value) <= self.max_len:
            fail(f"malformed header: {where} must hold 1..{self.max_len} items, "
                 f"got {len(value)}.")
        for i, item in enumerate(value):
            self.item.check(item, f"{where}[{i}]")


class _Object:
    def __init__(self, fields):
        self.fields = fields

    def check(self, value, where):
        if not isinstance(value, dict):
            fail(f"malformed header: {where} must be an object, got {_kind(value)}.")
        for key, field in self.fields.items():
            if key not in value:
                fail(f"malformed header: {where}.{key} is missing.")
            field.check(value[key], f"{where}.{key}")


def _kind(value):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(
                type(value), type(value).__name__)


_VERSION = _Str(128)


def _schema(payload_checksum):
    return _Object({
        "producer": _Object({
            "pmapkit": _VERSION, "jax": _VERSION, "jaxlib": _VERSION,
            "stablehlo": _VERSION, "stablehlo_target": _VERSION,
            "calling_convention_version": _Int(0, 2**31 - 1),
        }),
        "payload": _Object({
            "format": _Str(64),
            "length": _Int(0, 2**48),
            **payload_checksum,
        }),
        "exported": _Object({
            "fun_name": _Str(4096, min_len=0),
            "platforms": _List(_Str(32), 16),
            "nr_devices": _Int(1, 2**24),
            "vjp_order": _Int(0, 64),
            "strict_checks": _Bool(),
        }),
    })


#: The header's schema per container version: they differ in the payload's
#: checksum (version 1: SHA-256 in hex; version 2: CRC-32).
SCHEMAS = {1: _schema({"sha256": _Str(64, _SHA256_HEX, min_len=64)}),
           2: _schema({"crc32": _Int(0, 2**32 - 1)})}
SCHEMA = SCHEMAS[2]  # the one written


def check_writable(header):
    """A header about to be written satisfies the schema it will be read
    with (else ValueError: an artifact no pmapkit could load)."""
    try:
        SCHEMA.check(header, "header")
    except DeserializationError as exc:
        reason = str(exc).split("malformed header: ", 1)[-1]
        raise ValueError("pmapkit.export.serialize: cannot write an artifact "
                         f"whose header would be rejected on loading: {reason}") from None


# -- reading ---------------------------------------------------------------------
def _check_depth(text):
    """Reject nesting deeper than MAX_NESTING_DEPTH without parsing: brackets
    outside string literals, counted. (An unterminated string leaves its
    brackets counted: too strict only for text that is not JSON anyway.)"""
    if text.count("[") + text.count("{") <= MAX_NESTING_DEPTH:
        return  # not enough brackets to nest too deep (pmapkit's headers)
    depth = 0
    for bracket in re.findall(_BRACKET, re.sub(_STRING, '""', text, flags=re.S)):
        if bracket in "[{":
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                fail(f"malformed header: JSON nested deeper than "
                     f"{MAX_NESTING_DEPTH} levels.")
        else:
            depth -= 1


def _no_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            fail(f"malformed header: duplicate key {key[:80]!r}.")
        obj[key] = value
    return obj


def _no_constant(name):
    fail(f"malformed header: {name} is not a JSON number.")


def parse(raw, version) -> dict:
    """The checked header dict from the header bytes (untrusted) of a
    container of ``version``."""
    if len(raw) > MAX_HEADER_BYTES:
        fail(f"header of {len(raw)} bytes is larger than any pmapkit writes "
             f"(at most {MAX_HEADER_BYTES}).")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"malformed header (not UTF-8: {exc}).")
    _check_depth(text)
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates,
                            parse_constant=_no_constant)
    except DeserializationError:
        raise  # from a hook: a duplicate key or a NaN
    except ValueError as exc:  # JSONDecodeError; also int() past its digit limit
        fail(f"malformed header (not JSON: {exc}).")
    SCHEMAS[version].check(header, "header")
    if header["payload"]["format"] != PAYLOAD_FORMAT:
        fail(f"unknown payload format {header['payload']['format']!r}; this "
             f"pmapkit reads {PAYLOAD_FORMAT!r}.")
    return header

