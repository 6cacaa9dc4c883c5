"""Bad inputs to ``pmapkit.pmap``: options, arguments, bodies, results.

Each row builds a pmap and calls it as a user would. Rows with ``ref`` are
inputs pmap must take (the result is checked); the others must raise the
documented error naming the argument or the problem.
"""
from __future__ import annotations

import collections

from stress.common import Result, Wrong, jax, jnp, np, pmapkit, x8

SECTION = "bad_inputs"
Pair = collections.namedtuple("Pair", "a b")


def _call(fun, *args, **options):
    kwargs = options.pop("kwargs", {})
    return lambda: pmapkit.pmap(fun, **options)(*args, **kwargs)


def _twice(x):
    return x * 2


def _add(a, b):
    return a + b


def _scaled(x, k):
    return x * k


class _Opaque:
    """A class jax does not know as a pytree (holds an array)."""

    def __init__(self):
        self.value = np.ones(8, np.float32)


def register(reg):
    add = reg.section(SECTION, "pmap")
    x = x8()

    # -- in_axes ------------------------------------------------------------------
    for label, value in (("'a' (a str)", "a"), ("1.5", 1.5), ("[object()]", [object()]),
                         ("{'a': 'b'}", {"a": "b"}), ("True", True),
                         ("np.int64(0)", np.int64(0)), ("(0, 'x')", (0, "x"))):
        add(f"in_axes={label}", _call(_twice, x, in_axes=value), names="in_axes",
            **({"ref": lambda: x * 2} if label == "np.int64(0)" else {}))
    add("in_axes=(0, 0) for one argument", _call(_twice, x, in_axes=(0, 0)), names="in_axes")
    add("in_axes=(0,) for two arguments", _call(_add, x, x, in_axes=(0,)), names="in_axes")
    add("in_axes=1 on rank-1 input", _call(_twice, x, in_axes=1), names=("axis", "rank"))
    add("in_axes=-2 on rank-1 input", _call(_twice, x, in_axes=-2), names=("axis", "rank"))
    add("in_axes=None for every argument", _call(_twice, x, in_axes=None),
        names=("mapped", "in_axes"))
    add("in_axes=(None, None)", _call(_add, x, x, in_axes=(None, None)),
        names=("mapped", "in_axes"))
    add("in_axes dict keys differ from the argument's",
        _call(lambda d: d["b"], {"b": x}, in_axes=({"a": 0},)), names="in_axes")
    add("in_axes pytree deeper than the argument",
        _call(_twice, x, in_axes=((0, 0),)), names="in_axes")
    add("in_axes=[0] (a list, as a tuple)", _call(_twice, x, in_axes=[0]), ref=lambda: x * 2)
    add("in_axes=(0, None) with a Python scalar", _call(_scaled, x, 3.0, in_axes=(0, None)),
        ref=lambda: x * 3)
    add("in_axes=1 on a (3, 8) input", _call(_twice, x8(3).reshape(3, 8), in_axes=1),
        ref=lambda: (x8(3).reshape(3, 8) * 2).T)

    # -- out_axes -----------------------------------------------------------------
    for label, value in (("'a'", "a"), ("1.5", 1.5), ("[None, 'i']", [None, "i"])):
        add(f"out_axes={label}", _call(_twice, x, out_axes=value), names="out_axes")
    add("out_axes=(0, 0) for one output", _call(_twice, x, out_axes=(0, 0)), names="out_axes")
    add("out_axes=2 for a rank-0 slice", _call(_twice, x, out_axes=2), names="out_axes")
    add("out_axes=-3 for a rank-0 slice", _call(_twice, x, out_axes=-3), names="out_axes")
    add("out_axes={'a': 0} for a tuple output",
        _call(lambda v: (v, v), x, out_axes={"a": 0}), names="out_axes")
    add("out_axes=None (first device's value)", _call(_twice, x, out_axes=None),
        ref=lambda: np.float32(0))
    add("out_axes=1 on (8, 3) input", _call(_twice, x8(3), out_axes=1),
        ref=lambda: (x8(3) * 2).T)

    # -- axis_name ---------------------------------------------------------------------
    # Any hashable names the axis (classic pmap); an unhashable one is refused.
    for label, value in (("1", 1), ("('i',)", ("i",)), ("object()", object())):
        add(f"axis_name={label}", _call(_twice, x, axis_name=value), ref=lambda: x * 2)
    tag = object()
    add("psum over axis_name=object()", _call(lambda v: jax.lax.psum(v, tag), x, axis_name=tag),
        ref=lambda: np.full(8, x.sum(), np.float32))
    add("axis_name=['i'] (unhashable)", _call(_twice, x, axis_name=["i"]), names="axis_name")
    add("psum over an axis name not bound",
        _call(lambda v: jax.lax.psum(v, "j"), x, axis_name="i"),
        expect=(NameError, ValueError), names=("j",))
    add("psum over a name when axis_name=None",
        _call(lambda v: jax.lax.psum(v, "i"), x), expect=(NameError, ValueError), names=("i",))
    add("axis_name='' (empty)", _call(lambda v: jax.lax.psum(v, ""), x, axis_name=""),
        names="axis_name", ref=lambda: np.full(8, x.sum(), np.float32))

    # -- devices -------------------------------------------------------------------------
    add("devices=[]", _call(_twice, x, devices=[]), names="devices")
    add("devices=[0, 1] (ints)", _call(_twice, x[:2], devices=[0, 1]), names="jax.Device")
    add("devices='cpu'", _call(_twice, x, devices="cpu"), names="jax.Device")
    add("devices=5", _call(_twice, x, devices=5), names="jax.Device")
    add("devices=a Device, not a list", lambda: pmapkit.pmap(
        _twice, devices=jax.devices()[0])(x[:1]), names="jax.Device")
    add("devices=[d0, None]", lambda: pmapkit.pmap(
        _twice, devices=[jax.devices()[0], None])(x[:2]), names="jax.Device")
    add("devices=[d0, d0]", lambda: pmapkit.pmap(
        _twice, devices=[jax.devices()[0]] * 2)(x[:2]), names="devices")
    add("4 devices for an axis of 8", lambda: pmapkit.pmap(
        _twice, devices=jax.devices()[:4])(x), names="devices")
    add("devices in reverse order", lambda: pmapkit.pmap(
        _twice, devices=jax.devices()[::-1])(x), ref=lambda: x * 2)

    # -- axis_size, backend ------------------------------------------------------------------
    for label, value in (("0", 0), ("-1", -1), ("'8'", "8"), ("2.0", 2.0)):
        add(f"axis_size={label}", _call(_twice, x, axis_size=value), names="axis_size")
    add("axis_size=4 for an axis of 8", _call(_twice, x, axis_size=4), names="axis_size")
    add("axis_size=8 (matches)", _call(_twice, x, axis_size=8), ref=lambda: x * 2)
    add("backend='tpu' (absent)", _call(_twice, x, backend="tpu"),
        expect=(RuntimeError, ValueError), names="tpu")
    add("backend=1", _call(_twice, x, backend=1), expect=(TypeError, ValueError, RuntimeError),
        names="backend")

    # -- static_broadcasted_argnums ------------------------------------------------------------
    for label, value in (("'a'", "a"), ("1.5", 1.5), ("[0, 'x']", [0, "x"])):
        add(f"static_broadcasted_argnums={label}",
            _call(_scaled, x, 2, static_broadcasted_argnums=value),
            names="static_broadcasted_argnums")
    add("static_broadcasted_argnums=5 with two arguments",
        _call(_scaled, x, 2, static_broadcasted_argnums=5),
        names=("static_broadcasted_argnums", "positional"))
    add("static_broadcasted_argnums=-3 of two parameters",
        _call(_scaled, x, 2, static_broadcasted_argnums=-3), names="static_broadcasted_argnums")
    add("static_broadcasted_argnums=-1 (the last)",
        _call(_scaled, x, 3, static_broadcasted_argnums=-1), ref=lambda: x * 3)
    add("unhashable static argument (a list)",
        _call(lambda v, k: v * len(k), x, [1, 2], static_broadcasted_argnums=1),
        names=("hashable", "static"))
    add("unhashable static argument (an ndarray)",
        _call(lambda v, k: v * k.sum(), x, np.ones(2), static_broadcasted_argnums=1),
        names=("hashable", "static"))
    add("static argument passed by keyword",
        _call(_scaled, x, static_broadcasted_argnums=1, kwargs={"k": 2}),
        names=("static", "positional", "k"))
    add("static argument omitted",
        _call(_scaled, x, static_broadcasted_argnums=1), names=("static", "positional", "k"))

    # -- donate_argnums ------------------------------------------------------------------------
    for label, value in (("'a'", "a"), ("1.5", 1.5)):
        add(f"donate_argnums={label}", _call(_twice, x, donate_argnums=value),
            names="donate_argnums")
    add("donate_argnums overlapping static", _call(
        _scaled, x, 2, static_broadcasted_argnums=1, donate_argnums=1),
        names=("donate_argnums", "overlap"))
    add("donate_argnums=7 beyond the arguments", _call(_twice, x, donate_argnums=7),
        names="donate_argnums", ref=lambda: x * 2)
    add("one array donated in two positions", _donated_twice, names=("argument", "donat"))
    add("donated numpy input", _call(_twice, x.copy(), donate_argnums=0), ref=lambda: x * 2)

    # -- arguments ---------------------------------------------------------------------------
    add("mapped sizes 8 and 4", _call(_add, x, x[:4]), names=("size", "inconsistent"))
    add("mapped sizes differ inside a pytree",
        _call(lambda d: d["a"] + d["b"][:1], {"a": x, "b": x[:4]}),
        names=("size", "inconsistent"))
    for label, value in (("'s'", "s"), ("object()", object()), ("{1, 2} (a set)", {1, 2}),
                         ("a bytes object", b"abc"), ("a lambda", lambda: 1)):
        add(f"argument {label}", _call(_add, x, value), names=("argument", "b", "type"))
    add("argument None next to an array", _call(lambda v, n: v * 2, x, None),
        ref=lambda: x * 2)
    add("None as the only argument", _call(lambda n: 1.0, None), names=("mapped", "argument"))
    add("Python list of 8 floats (rank-0 leaves)", _call(_twice, [1.0] * 8),
        names=("rank", "axis"))
    add("scalar argument with in_axes=0", _call(_twice, np.float32(3)),
        names=("rank", "axis"))
    add("axis of 9 on 8 devices", _call(_twice, x8(n=9)), names=("devices", "9"))
    add("axis of 0", _call(_twice, np.zeros((0,), np.float32)),
        names=("size 0", "0 devices"), ref=lambda: np.zeros((0,), np.float32))
    add("numpy string array", _call(_twice, np.array(["a"] * 8)),
        names=("dtype", "type", "str", "<U1"))
    add("numpy object array", _call(_twice, np.array([object()] * 8)),
        names=("dtype", "type", "object"))
    add("complex128 input", _call(_twice, x.astype(np.complex128)),
        ref=lambda: (x * 2).astype(np.complex64))
    add("int64 input", _call(_twice, x.astype(np.int64)), ref=lambda: (x * 2).astype(np.int32))
    add("a deleted jax.Array", _deleted_input, expect=RuntimeError, match="deleted")
    add("an array committed to device 7", lambda: pmapkit.pmap(_twice)(
        jax.device_put(x, jax.devices()[7])), ref=lambda: x * 2)
    add("keyword argument (mapped over 0)", _call(lambda v: v * 2, kwargs={"v": x}),
        ref=lambda: x * 2)
    add("keyword argument of another size", _call(_add, x, kwargs={"b": x[:4]}),
        names=("size", "inconsistent"))
    add("unknown keyword argument", _call(_twice, x, kwargs={"nope": x}),
        names=("nope", "keyword"))
    add("too many positional arguments", _call(_twice, x, x), names=("positional", "argument"))
    add("namedtuple argument", _call(lambda p: p.a + p.b, Pair(x, x)), ref=lambda: x * 2)
    add("an object jax does not know, holding an array", _call(lambda o: o, _Opaque()),
        names=("_Opaque", "type"))
    add("jax.ShapeDtypeStruct as a call argument", _call(
        _twice, jax.ShapeDtypeStruct((8,), np.float32)), names=("ShapeDtypeStruct", "type"))
    add("dict with int and str keys", _call(
        lambda d: d, {1: x, "a": x}), names=("key", "sort", "dict", "compar"))

    # -- what the body does, what it returns ---------------------------------------------------
    for label, fun in (("'s'", lambda v: "s"), ("object()", lambda v: object()),
                       ("[x, 's'] ('s' at [1])", lambda v: [v, "s"]),
                       ("a lambda", lambda v: (lambda: 1)),
                       ("{'k': {1, 2}}", lambda v: {"k": {1, 2}})):
        add(f"body returns {label}", _call(fun, x), names=("output", "return", "type"))
    add("body returns None", _call(lambda v: None, x), ref=lambda: None)
    add("body returns a Python float", _call(lambda v: 1.0, x),
        ref=lambda: np.ones(8, np.float32))
    add("body returns a numpy constant", _call(lambda v: np.arange(3.0, dtype=np.float32), x),
        ref=lambda: np.tile(np.arange(3.0, dtype=np.float32), (8, 1)))
    add("body raises ValueError", _call(_raise(ValueError("from the body")), x),
        expect=ValueError, match="from the body")
    add("body raises ZeroDivisionError", _call(lambda v: 1 / 0, x),
        expect=ZeroDivisionError)
    add("body shape error (rank-0 @ matrix)", _call(lambda v: v @ jnp.ones((3, 3)), x),
        names=("shape", "rank", "dot", "matmul", "dimension"))
    add("body float(x) (concretization)", _call(lambda v: float(v), x),
        names=("concrete", "tracer", "Tracer"))
    add("body np.asarray(x)", _call(lambda v: np.asarray(v), x),
        names=("tracer", "Tracer", "numpy"))
    add("body `if x > 0`", _call(lambda v: v if v > 0 else -v, x),
        names=("tracer", "Tracer", "bool"))

    # -- pmap itself, lower, compiled ------------------------------------------------------------
    for label, fun in (("1", 1), ("None", None), ("'f'", "f")):
        add(f"pmap({label})", lambda fun=fun: pmapkit.pmap(fun)(x), names=("callable", "fun"))
    add("pmap(f, bogus_keyword=1)", lambda: pmapkit.pmap(_twice, bogus_keyword=1),
        names="bogus_keyword")
    add("lower('s')", lambda: pmapkit.pmap(_twice).lower("s"), names=("argument", "type", "x"))
    add("compiled called with another shape",
        lambda: pmapkit.pmap(_twice).lower(x).compile()(x8(2)), names=("shape", "float32"))
    add("compiled called with another dtype",
        lambda: pmapkit.pmap(_twice).lower(x).compile()(x.astype(np.int32)),
        names=("dtype", "int32"))
    add("compiled called with two arguments",
        lambda: pmapkit.pmap(_twice).lower(x).compile()(x, x),
        names=("argument", "pytree", "structure"))
    add("nested pmap needing 16 devices", _call(pmapkit.pmap(_twice), x8(8, n=2)),
        names=("devices", "16"))
    add("nested pmap with devices= on the inner", _call(
        pmapkit.pmap(_twice, devices=jax.devices()[:2]), x8(2, n=2)),
        names=("devices", "nested"))
    add("jit of pmap with an axis of 9", lambda: jax.jit(pmapkit.pmap(_twice))(x8(n=9)),
        names=("devices", "9"))
    add("grad of pmap with a non-scalar output", lambda: jax.grad(pmapkit.pmap(_twice))(x),
        names=("scalar", "shape"))
    add("vmap of pmap over a size-2 batch", lambda: jax.vmap(pmapkit.pmap(_twice))(x8(8, n=2)),
        ref=lambda: x8(8, n=2) * 2)
    add("error does not poison the function", _error_then_call)
    add("pickled pmap round trip", _pickle_round_trip)


def _raise(exc):
    def body(v):
        raise exc
    return body


def _donated_twice():
    y = pmapkit.pmap(_twice)(x8())   # a device array
    return pmapkit.pmap(_add, donate_argnums=0)(y, y)


def _deleted_input():
    y = pmapkit.pmap(_twice)(x8())
    y.delete()
    return pmapkit.pmap(_twice)(y)


def _error_then_call():
    f = pmapkit.pmap(_add)
    x = x8()
    for _ in range(2):
        try:
            f(x, x[:4])
        except ValueError:
            pass
        else:
            raise Wrong("mapped sizes 8 and 4 were accepted")
    out = f(x, x)
    if not np.array_equal(np.asarray(out), x * 2):
        raise Wrong(f"after an error the next call returned {np.asarray(out)}")
    return Result("errors leave the function working")


def _pickle_round_trip():
    import pickle
    f = pmapkit.pmap(_twice)
    g = pickle.loads(pickle.dumps(f))
    x = x8()
    if not np.allclose(np.asarray(g(x)), x * 2):
        raise Wrong("the unpickled pmap computes something else")
    return Result("same result after pickling")
