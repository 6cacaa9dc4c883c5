"""Crafted artifacts: a container whose checksums are valid but whose header
was written by an attacker or a buggy writer. Every failure is a
DeserializationError saying what is wrong, never another exception (no
KeyError, TypeError or RecursionError out of the header)."""
import copy
import json

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pmapkit import export as pe
from pmapkit.export import _header

from _export_helpers import payload_record, reseal, sds, split_artifact, values


@pytest.fixture(scope="module")
def parts():
    exported = pe.export(lambda x, w: jnp.tanh(x @ w))(sds((2, 3)), sds((3, 2)))
    text, payload = split_artifact(pe.serialize(exported))
    return json.loads(text), payload


def _crafted(header, payload):
    return reseal(json.dumps(header), payload)


def _both_reject(data, match):
    """deserialize and artifact_info refuse ``data`` with the same reason."""
    with pytest.raises(pe.DeserializationError, match=match):
        pe.deserialize(data)
    with pytest.raises(pe.DeserializationError, match=match):
        pe.artifact_info(data)


def test_the_untouched_header_loads(parts):
    header, payload = parts
    x, w = values((2, 3)), values((3, 2), seed=1)
    got = pe.deserialize(_crafted(header, payload)).call(x, w)
    np.testing.assert_allclose(np.asarray(got), np.tanh(x @ w), rtol=1e-6)


def test_missing_payload_format(parts):
    header, payload = copy.deepcopy(parts[0]), parts[1]
    del header["payload"]["format"]
    _both_reject(_crafted(header, payload), r"malformed header: header\.payload\.format "
                                            r"is missing\.")


@pytest.mark.parametrize("depth", [17, 1000, 30_000])   # 2x30,000 bytes fit the size cap
def test_deeply_nested_header(parts, depth):
    header, payload = parts
    # Nesting where a value belongs and in a key the schema does not know:
    # both are refused before the JSON parser sees them.
    text = json.dumps(header)
    deep = "[" * depth + "]" * depth
    in_value = text.replace('"jax.export"', deep, 1)
    in_extra = text[:-1] + ', "extra": ' + deep + "}"
    whole = deep
    for crafted in (in_value, in_extra, whole):
        _both_reject(reseal(crafted, payload),
                     f"JSON nested deeper than {_header.MAX_NESTING_DEPTH} levels")


def test_nesting_at_the_limit_is_not_an_error_of_depth(parts):
    header, payload = parts
    n = _header.MAX_NESTING_DEPTH - 1   # the header object is one level
    text = json.dumps(header)[:-1] + ', "extra": ' + "[" * n + "]" * n + "}"
    assert pe.deserialize(reseal(text, payload)).fun_name == "<lambda>"


def test_brackets_inside_strings_are_not_nesting(parts):
    header, payload = copy.deepcopy(parts[0]), parts[1]
    header["note"] = "[{" * 5000 + '\\"]'   # an unknown key: ignored
    assert pe.deserialize(_crafted(header, payload)).fun_name == "<lambda>"


def _set(path, value):
    def edit(h):
        *parent, key = path
        for k in parent:
            h = h[k]
        h[key] = value
    return edit


def _delete(path):
    def edit(h):
        *parent, key = path
        for k in parent:
            h = h[k]
        del h[key]
    return edit


@pytest.mark.parametrize("edit,match", [
    (_delete(("producer",)), r"header\.producer is missing"),
    (_delete(("exported", "nr_devices")), r"header\.exported\.nr_devices is missing"),
    (_delete(("producer", "calling_convention_version")),
     r"header\.producer\.calling_convention_version is missing"),
    (_set(("payload",), [1, 2]), r"header\.payload must be an object, got a list"),
    (_set(("payload", "format"), 7), r"header\.payload\.format must be a string, got an integer"),
    (_set(("payload", "format"), {"a": 1}), r"format must be a string, got an object"),
    (_set(("payload", "length"), "12"), r"header\.payload\.length must be an integer, got a string"),
    (_set(("payload", "length"), True), r"length must be an integer, got a boolean"),
    (_set(("payload", "length"), 12.0), r"length must be an integer, got a number"),
    (_set(("payload", "length"), -1), r"header\.payload\.length = -1 is out of range"),
    (_set(("payload", "length"), 10**30), r"is out of range"),
    (_set(("payload", "crc32"), "12"), r"header\.payload\.crc32 must be an integer, got a string"),
    (_set(("payload", "crc32"), 2**32), r"header\.payload\.crc32 = 4294967296 is out of range"),
    (_delete(("payload", "crc32")), r"header\.payload\.crc32 is missing"),
    (_set(("producer", "jax"), None), r"header\.producer\.jax must be a string, got null"),
    (_set(("producer", "jax"), "x" * 129), r"producer\.jax must be a string of 1\.\.128 characters"),
    (_set(("producer", "calling_convention_version"), 2**40), r"out of range"),
    (_set(("exported", "platforms"), []), r"header\.exported\.platforms must hold 1\.\.16 items"),
    (_set(("exported", "platforms"), ["cpu", 3]), r"header\.exported\.platforms\[1\] must be a string"),
    (_set(("exported", "platforms"), "cpu"), r"platforms must be a list, got a string"),
    (_set(("exported", "nr_devices"), 0), r"header\.exported\.nr_devices = 0 is out of range"),
    (_set(("exported", "strict_checks"), 1), r"strict_checks must be true or false, got an integer"),
    (_set(("exported", "vjp_order"), -2), r"vjp_order = -2 is out of range"),
    (_set(("payload", "format"), "pickle"), r"unknown payload format 'pickle'"),
])
def test_schema_violations_say_which_field(parts, edit, match):
    header, payload = copy.deepcopy(parts[0]), parts[1]
    edit(header)
    _both_reject(_crafted(header, payload), match)


@pytest.mark.parametrize("edit,match", [
    (_set(("payload", "sha256"), "ab" * 31), r"header\.payload\.sha256 must be a string of exactly 64 characters, got 62"),
    (_set(("payload", "sha256"), "Z" * 64), r"sha256 = 'ZZZ.*' is not \[0-9a-f\]\{64\}"),
    (_set(("payload", "sha256"), 7), r"header\.payload\.sha256 must be a string, got an integer"),
])
def test_version_1_schema_violations_say_which_field(parts, edit, match):
    # Container version 1 (SHA-256) headers are read with their own schema.
    header, payload = copy.deepcopy(parts[0]), parts[1]
    header["payload"].pop("crc32")
    header["payload"]["sha256"] = "0" * 64
    edit(header)
    _both_reject(reseal(json.dumps(header), payload, version=1), match)


@pytest.mark.parametrize("text,match", [
    ("[]", r"header must be an object, got a list"),
    ("null", r"header must be an object, got null"),
    ('"header"', r"header must be an object, got a string"),
    ("{", r"not JSON"),
    ("", r"not JSON"),
    ('{"producer": NaN}', r"NaN is not a JSON number"),
    ('{"a": 1, "a": 2}', r"duplicate key 'a'"),
    ('{"a": 1' + "0" * 5000 + "}", r"not JSON"),   # past int()'s digit limit
    (b'{"a": "\xff"}', r"not UTF-8"),
])
def test_header_text_that_is_not_a_header(parts, text, match):
    _both_reject(reseal(text, parts[1]), match)


def test_header_size_is_bounded(parts):
    with pytest.raises(pe.DeserializationError, match="larger than any pmapkit writes"):
        _header.parse(b" " * (_header.MAX_HEADER_BYTES + 1), 2)


def test_serialize_refuses_to_write_an_unloadable_header():
    def fun(x):
        return x + 1
    fun.__name__ = "f" * 5000
    exported = pe.export(fun)(sds((2,)))
    with pytest.raises(ValueError, match=r"serialize: cannot write an artifact whose "
                                         r"header would be rejected on loading: "
                                         r"header\.exported\.fun_name must be a string "
                                         r"of 0\.\.4096 characters, got 5000"):
        pe.serialize(exported)


# -- the property: any header, every failure a DeserializationError -------------
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                  st.floats(allow_nan=False, allow_infinity=False),
                  st.text(max_size=12), st.sampled_from(["cpu", "jax.export", "0.10.2"]))
_JSON = st.recursive(_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
_PLACEHOLDER = "\u0000deep\u0000"


def _paths(obj, prefix=()):
    """Every key path of the nested dicts/lists of ``obj``."""
    items = (obj.items() if isinstance(obj, dict)
             else enumerate(obj) if isinstance(obj, list) else ())
    for key, value in items:
        yield prefix + (key,)
        yield from _paths(value, prefix + (key,))


def _container_at(header, path):
    for key in path[:-1]:
        header = header[key]
    return header


@st.composite
def _mutated_headers(draw, header):
    """Header text: the artifact's header with 1..3 mutations (a value of any
    JSON type, a deleted key, an added key, deep nesting, or a raw text
    edit)."""
    header = copy.deepcopy(header)
    deep = None
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(header))
        kind = draw(st.sampled_from(["replace", "delete", "add", "nest", "text"]))
        if kind == "text" or not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _container_at(header, path)
        if kind == "replace":
            parent[path[-1]] = draw(_JSON)
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "add":
            target = parent[path[-1]]
            if isinstance(target, dict):
                target[draw(st.text(max_size=8))] = draw(_JSON)
            elif isinstance(target, list):
                target.append(draw(_JSON))
            else:
                parent[path[-1]] = [target, draw(_JSON)]
        elif deep is None:   # "nest": once, spliced into the text below
            depth = draw(st.one_of(st.integers(1, 40), st.just(100_000)))
            brackets = draw(st.sampled_from(["[]", "{}"]))
            inner = '"k": 1' if brackets == "{}" else "1"
            opening = ('{"k": ' if brackets == "{}" else "[") * (depth - 1)
            deep = opening + brackets[0] + inner + brackets[1] * depth
            parent[path[-1]] = _PLACEHOLDER
    text = json.dumps(header)
    if deep is not None:
        text = text.replace(json.dumps(_PLACEHOLDER), deep, 1)
    if kind == "text" and text:
        i = draw(st.integers(0, len(text) - 1))
        piece = draw(st.text(alphabet='{}[]",:0123456789-.eE \\atrufnl', max_size=3))
        text = text[:i] + piece + text[i + draw(st.integers(0, 2)):]
    return text


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_property_any_crafted_header_is_loaded_or_a_deserialization_error(parts, data):
    header, payload = parts
    text = data.draw(_mutated_headers(header))
    crafted = reseal(text, payload)
    for load in (pe.deserialize, pe.artifact_info):
        try:
            load(crafted)
        except pe.DeserializationError:
            pass   # anything else propagates and fails the property


def test_a_payload_whose_module_does_not_parse_is_rejected_at_its_first_call(parts):
    # The flatbuffer is intact and every checksum matches, but the StableHLO
    # bytecode inside it is not a module: the module is parsed once, by the
    # first call's compile (not a second time at load), and that call says
    # the artifact is bad; it never runs.
    header, payload = parts
    magic = b"ML\xefR"  # MLIR bytecode starts with it
    at = payload.find(magic)
    assert at > 0
    broken = payload[:at] + b"XXXX" + payload[at + 4:]
    header = copy.deepcopy(header)
    header["payload"].update(payload_record(broken))
    loaded = pe.deserialize(_crafted(header, broken))
    args = [np.zeros(a.shape, a.dtype) for a in loaded.in_avals]
    for _ in range(2):  # not remembered as good after failing
        with pytest.raises(pe.DeserializationError, match="StableHLO module does not parse"):
            loaded.call(*args)
