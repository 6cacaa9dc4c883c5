"""Bad inputs to ``pmapkit.export``: export options, specs, calls with the
wrong arguments, and corrupted or crafted artifacts (every bad artifact must
be a ``DeserializationError``)."""
from __future__ import annotations

import copy

from stress import artifacts as art
from stress.common import P, Result, Wrong, jax, jnp, np, pe, pmapkit, x8

SECTION = "bad_inputs"
F32 = jnp.float32


def _f(x):
    return x * 2


def _spec(*shape):
    return jax.ShapeDtypeStruct(shape, F32)


def _blob(kind="plain"):
    return art.artifacts()[kind][0]


def _loaded(kind="plain"):
    return pe.deserialize(_blob(kind))


def _call_plain(*args, **kwargs):
    return lambda: _loaded().call(*args, **kwargs)


def _crafted(edit, kind="plain"):
    """A blob whose header ``edit(header)`` changed, checksums recomputed."""
    def body():
        blob = _blob(kind)
        version, header, payload = art.split(blob)
        header = copy.deepcopy(header)
        result = edit(header)
        header_bytes = result if isinstance(result, bytes) else art.dump(header)
        return pe.deserialize(art.seal(header_bytes, payload, version))
    return body


def _del(path):
    def edit(header):
        node = header
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


def _set(path, value):
    def edit(header):
        node = header
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def register(reg):
    add = reg.section(SECTION, "export")
    bad = reg.section(SECTION, "export", expect=pe.DeserializationError)
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    w = np.ones((3, 2), np.float32)

    # -- export options ---------------------------------------------------------------------
    add("export(1)", lambda: pe.export(1), names=("fun", "callable"))
    add("export(f)('s')", lambda: pe.export(_f)("s"), names=("str", "type", "shape"))
    add("export(f)(object())", lambda: pe.export(_f)(object()), names=("object", "type", "shape"))
    add("platforms='tpuX'", lambda: pe.export(_f, platforms="tpuX")(_spec(3)),
        names=("tpuX", "platform"))
    add("platforms=[1]", lambda: pe.export(_f, platforms=[1])(_spec(3)), names="platforms")
    add("platforms=[]", lambda: pe.export(_f, platforms=[])(_spec(3)), names="platform")
    add("platforms=['cpu', 'cpu']", lambda: pe.export(_f, platforms=["cpu", "cpu"])(_spec(3)),
        names=("platform", "twice"))
    add("lowering_platform and platforms", lambda: pe.export(
        _f, lowering_platform="cpu", platforms=["cpu"]), names=("lowering_platform", "platforms"))
    add("strict_checks='yes'", lambda: pe.export(_f, strict_checks="yes"), names="strict_checks")
    add("disabled_checks=['x']", lambda: pe.export(_f, disabled_checks=["x"])(_spec(3)),
        names=("disabled_checks", "DisabledSafetyCheck"))
    add("pjit export without a mesh", lambda: pe.export(pmapkit.pjit(_f, P("x"), None))(
        _spec(8)), expect=(RuntimeError, ValueError), names="mesh")
    add("pmap export with an axis of 9", lambda: pe.export(pmapkit.pmap(_f))(_spec(9)),
        names=("devices", "9"))

    # -- poly_spec ---------------------------------------------------------------------------
    add("poly_spec rank 2 with spec of rank 1", lambda: pe.poly_spec((None, 3), F32, "b"),
        names=("(None, 3)", "'b'", "rank"))
    add("poly_spec arg_shape='ab'", lambda: pe.poly_spec("ab", F32, "b"), names="arg_shape")
    add("poly_spec arg_shape=(1.5,)", lambda: pe.poly_spec((1.5,), F32, "b"), names="arg_shape")
    add("poly_spec polymorphic_shape=1", lambda: pe.poly_spec((None,), F32, 1),
        names="polymorphic_shape")
    add("poly_spec 'b+'", lambda: pe.poly_spec((None,), F32, "b+"),
        names=("b+", "polymorphic_shape"))
    add("poly_spec '('", lambda: pe.poly_spec((None,), F32, "("),
        names=("(", "polymorphic_shape"))
    add("poly_spec None for an unknown dim", lambda: pe.poly_spec((None,), F32, None),
        names=("None", "polymorphic_shape"))
    add("poly_spec '4' for a dim of 3", lambda: pe.poly_spec((3,), F32, "4"),
        names=("4", "3"))
    add("poly_spec dtype 'notadtype'", lambda: pe.poly_spec((None,), "notadtype", "b"),
        names=("dtype", "notadtype"))
    add("poly_specs structure mismatch", lambda: pe.poly_specs((x, w), ("b, 3",)),
        names=("structure", "polymorphic_shapes", "tree", "prefix"))

    # -- calling an artifact with the wrong arguments -------------------------------------------
    add("call with float16", _call_plain(x.astype(np.float16), w), names=("dtype", "float16"))
    add("call with another shape", _call_plain(np.ones((5, 3), np.float32), w),
        names=("shape",))
    add("call with another rank", _call_plain(np.ones(3, np.float32), w), names=("rank",))
    add("call with a dict for the arguments", _call_plain({"x": x, "w": w}),
        names=("structure", "pytree"))
    add("call with 's'", _call_plain("s", w), names=("str", "type"))
    add("call with one argument of two", _call_plain(x), names=("structure", "pytree"))
    add("call with a keyword argument", _call_plain(x, w=w), names=("structure", "pytree"))
    add("call correct (reference)", _call_plain(x, w), ref=lambda: np.tanh(x @ w) + 1)
    add("poly artifact with 0 rows", lambda: pe.deserialize(art.poly_artifact()).call(
        np.ones((0, 3), np.float32)), names=("b", "shape", "dimension"),
        ref=lambda: np.ones((0, 3), np.float32))
    add("poly artifact with 5 columns", lambda: pe.deserialize(art.poly_artifact()).call(
        np.ones((2, 5), np.float32)), names=("shape",))
    add("poly artifact with 7 rows", lambda: pe.deserialize(art.poly_artifact()).call(
        np.ones((7, 3), np.float32)), ref=lambda: np.full((7, 3), 2.0, np.float32))
    add("pmap artifact under a 4-device mesh", lambda: _pmap_on_mesh(4),
        names=("device", "8", "4"))
    add("vjp of an artifact saved without one", lambda: _loaded().vjp(),
        names=("vjp", "VJP"))
    add("grad through an artifact saved without a VJP", lambda: jax.grad(
        lambda v: _loaded().call(v, w).sum())(x), names=("vjp", "VJP", "differentiat"))

    # -- serialize ---------------------------------------------------------------------------
    add("serialize vjp_order=-1", lambda: pe.serialize(pe.export(_f)(_spec(3)), vjp_order=-1),
        names="vjp_order")
    add("serialize vjp_order='a'", lambda: pe.serialize(pe.export(_f)(_spec(3)), vjp_order="a"),
        names="vjp_order")
    add("serialize('x')", lambda: pe.serialize("x"), names=("exported", "Exported"))

    # -- deserialize: whole blobs ------------------------------------------------------------
    add("deserialize('a str')", lambda: pe.deserialize("a str"), names=("data", "bytes"))
    add("deserialize(None)", lambda: pe.deserialize(None), names=("data", "bytes"))
    bad("deserialize(b'')", lambda: pe.deserialize(b""), names="empty")
    bad("deserialize(b'garbage')", lambda: pe.deserialize(b"garbage"), names="magic")
    bad("truncated by one byte", lambda: pe.deserialize(_blob()[:-1]), names="truncated")
    bad("truncated inside the header", lambda: pe.deserialize(_blob()[:40]), names="truncated")
    bad("one byte appended", lambda: pe.deserialize(_blob() + b"x"), names="unexpected")
    bad("a raw jax.export blob", lambda: pe.deserialize(bytes(
        art.split(_blob())[2])), names="magic")
    bad("artifact_info(b'garbage')", lambda: pe.artifact_info(b"garbage"), names="magic")
    bad("header byte flipped", lambda: pe.deserialize(_flip(_blob(), 30)), names="checksum")
    bad("payload byte flipped", lambda: pe.deserialize(_flip(_blob(), -100)), names="checksum")
    bad("container version 99", lambda: pe.deserialize(_with_version(99)), names="version")
    bad("header length 0xFFFFFFFF", lambda: pe.deserialize(_huge_header_length()),
        names=("header length", "implausible"))
    add("deserialize(bytearray)", lambda: _loaded_from(bytearray(_blob())))
    add("deserialize(non-contiguous memoryview)", lambda: _loaded_from(
        memoryview(bytes(b for b in _blob() for _ in (0, 1)))[::2]))

    # -- deserialize: crafted headers, checksums recomputed -----------------------------------
    bad("header without payload.format", _crafted(_del(("payload", "format"))),
        names="payload.format")
    bad("header without producer", _crafted(_del(("producer",))), names="producer")
    bad("header without exported.nr_devices", _crafted(_del(("exported", "nr_devices"))),
        names="nr_devices")
    bad("header nested 10,000 deep", _crafted(lambda h: (
        b'{"a":' * 10000 + b"1" + b"}" * 10000)), names=("nested", "depth"))
    bad("header with NaN", _crafted(lambda h: art.dump(h).replace(
        b'"vjp_order":0', b'"vjp_order":NaN')), names=("NaN", "number"))
    bad("header with a duplicate key", _crafted(lambda h: art.dump(h).replace(
        b'{"exported":', b'{"exported":1,"exported":', 1)), names=("duplicate",))
    bad("header not JSON", _crafted(lambda h: b"{not json"), names=("JSON",))
    bad("header not UTF-8", _crafted(lambda h: b'{"a":"\xff\xfe"}'), names=("UTF-8",))
    bad("header is a list", _crafted(lambda h: b"[1,2,3]"), names=("object", "header"))
    bad("header of 70,000 bytes", _crafted(lambda h: art.dump({**h, "pad": "x" * 70000})),
        names=("header", "larger", "implausible"))
    bad("payload.format 'pickle'", _crafted(_set(("payload", "format"), "pickle")),
        names=("format", "pickle"))
    bad("payload.length a string", _crafted(_set(("payload", "length"), "12")),
        names=("length",))
    bad("payload.length 10**400", _crafted(lambda h: art.dump(h).replace(
        b'"length":', b'"length":1' + b"0" * 400 + b",\"x\":", 1)),
        names=("length", "JSON", "digit", "integer"))
    bad("payload.crc32 a string", _crafted(_set(("payload", "crc32"), "z" * 8)),
        names=("crc32",))
    bad("payload.crc32 past 32 bits", _crafted(_set(("payload", "crc32"), 2**32)),
        names=("crc32",))
    bad("calling convention 9999", _crafted(_set(
        ("producer", "calling_convention_version"), 9999)), names=("calling convention",))
    bad("calling convention -1", _crafted(_set(
        ("producer", "calling_convention_version"), -1)), names=("calling_convention",))
    bad("calling convention true", _crafted(_set(
        ("producer", "calling_convention_version"), True)), names=("calling_convention",))
    bad("nr_devices mismatch", _crafted(_set(("exported", "nr_devices"), 3)),
        names=("nr_devices",))
    bad("fun_name mismatch", _crafted(_set(("exported", "fun_name"), "other")),
        names=("fun_name",))
    bad("header exported.platforms=[]", _crafted(_set(("exported", "platforms"), [])), names=("platforms",))
    bad("header exported.vjp_order=99", _crafted(_set(("exported", "vjp_order"), 99)), names=("vjp_order",))
    add("producer.jax changed (harmless)", lambda: _crafted(
        _set(("producer", "jax"), "0.0.1"))().call(x, w), ref=lambda: np.tanh(x @ w) + 1)
    bad("payload replaced by random bytes", lambda: pe.deserialize(_other_payload(
        np.random.default_rng(0).bytes(len(art.split(_blob())[2])))),
        names=("payload", "jax.export"))
    bad("payload of another artifact", lambda: pe.deserialize(_other_payload(
        bytes(art.split(_blob("pmap"))[2]))), names=("fun_name", "nr_devices", "payload"))
    bad("payload truncated (recomputed)", lambda: pe.deserialize(_other_payload(
        bytes(art.split(_blob())[2])[:200])), names=("payload", "jax.export"))
    bad("empty payload (recomputed)", lambda: pe.deserialize(_other_payload(b"")),
        names=("payload", "jax.export", "length"))


def _flip(blob, at):
    data = bytearray(blob)
    data[at] ^= 0x40
    return bytes(data)


def _with_version(version):
    blob = _blob()
    _, header, payload = art.split(blob)
    return art.seal(art.dump(header), bytes(payload), version)


def _huge_header_length():
    blob = bytearray(_blob())
    art.PREAMBLE.pack_into(blob, art.MAGIC_LEN, 1, 0xFFFFFFFF)
    return bytes(blob)


def _other_payload(payload):
    version, header, _ = art.split(_blob())
    return art.seal(None, payload, version, fix_payload_digest=copy.deepcopy(header))


def _loaded_from(data):
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    w = np.ones((3, 2), np.float32)
    out = pe.deserialize(data).call(x, w)
    if not np.allclose(np.asarray(out), np.tanh(x @ w) + 1, atol=1e-6):
        raise Wrong("the loaded artifact computes something else")
    return Result("loads and runs")


def _pmap_on_mesh(n):
    exported = pe.deserialize(_blob("pmap"))
    with pmapkit.Mesh(np.array(jax.devices()[:n]), ("i",)):
        return exported.call(x8())
