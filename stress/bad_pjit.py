"""Bad inputs to ``pmapkit.pjit``, ``Mesh`` and ``with_sharding_constraint``.

Meshes: ``mesh1d`` is 8 devices on axis 'x'; ``mesh2d`` is 2 x 4 on ('x', 'y').
"""
from __future__ import annotations

from stress.common import (NamedSharding, P, Result, Wrong, jax, jnp, mesh1d, mesh2d, np,
                           pmapkit, x8)

SECTION = "bad_inputs"


def _under(mesh_fn, pjit_args, call_args, kwargs=None, pjit_kwargs=None):
    """pjit(*pjit_args, **pjit_kwargs) called with call_args under the mesh."""
    def body():
        f = pmapkit.pjit(*pjit_args, **(pjit_kwargs or {}))
        if mesh_fn is None:
            return f(*call_args, **(kwargs or {}))
        with mesh_fn():
            return f(*call_args, **(kwargs or {}))
    return body


def _twice(x):
    return x * 2


def _add(a, b):
    return a + b


def register(reg):
    add = reg.section(SECTION, "pjit")
    x = x8()
    x84 = x8(4)

    # -- axis resources at decoration ----------------------------------------------------
    for label, value in (("'x' (a str)", "x"), ("1", 1), ("object()", object()),
                         ("P(1)", P(1)), ("[[0]]", [[0]])):
        add(f"in_axis_resources={label}", _under(mesh1d, (_twice, value, None), (x,)),
            names=("in_axis_resources", "PartitionSpec"))
        add(f"out_axis_resources={label}", _under(mesh1d, (_twice, None, value), (x,)),
            names=("out_axis_resources", "PartitionSpec"))
    add("in_axis_resources=P('x', 'x')", _under(mesh2d, (_twice, P("x", "x"), None), (x84,)),
        names=("x", "more than once", "twice", "multiple"))
    add("out_axis_resources=P('x', 'x')", _under(mesh2d, (_twice, None, P("x", "x")), (x84,)),
        names=("x", "more than once", "twice", "multiple"))
    add("in_axis_resources=P(('x', 'x'))", _under(mesh2d, (_twice, P(("x", "x")), None), (x,)),
        names=("x", "more than once", "twice", "multiple"))
    add("in_axis_resources and in_shardings both", _under(
        mesh1d, (_twice, None, None), (x,), pjit_kwargs={"in_shardings": None}),
        names=("in_axis_resources", "in_shardings"))
    add("in_axis_resources=P(P.UNCONSTRAINED)", _under(
        mesh1d, (_twice, P(P.UNCONSTRAINED), None), (x,)),
        names=("UNCONSTRAINED", "unconstrained", "in_axis_resources"))
    # 0.4-era pjit: a Sharding carries its devices (it runs there, as jax.jit).
    add("in_shardings=SingleDeviceSharding", lambda: _single_device_sharding(x),
        names=("in_shardings", "Sharding", "sharding"), ref=lambda: x * 2)
    add("in_shardings=NamedSharding of another mesh", lambda: _other_mesh_named(x),
        names=("mesh", "device"), ref=lambda: x * 2)
    add("in_axis_resources=[P('x')] (a list)", _under(mesh1d, (_twice, [P("x")], None), (x,)),
        ref=lambda: x * 2)
    add("in_axis_resources=P(('x', 'y')) over 8", _under(
        mesh2d, (_twice, P(("x", "y")), None), (x,)), ref=lambda: x * 2)

    # -- other options ------------------------------------------------------------------------
    add("static_argnums='a'", _under(mesh1d, (_twice, None, None, "a"), (x,)),
        names="static_argnums")
    add("static_argnames=1", _under(mesh1d, (_twice, None, None), (x,),
                                    pjit_kwargs={"static_argnames": 1}), names="static_argnames")
    add("static_argnames=['nope']", _under(mesh1d, (_twice, None, None), (x,),
                                           pjit_kwargs={"static_argnames": ["nope"]}),
        names=("nope", "static_argnames"))
    add("donate_argnums='a'", _under(mesh1d, (_twice, None, None, None, "a"), (x,)),
        names="donate_argnums")
    add("donate_argnums overlapping static_argnums", _under(
        mesh1d, (_add, None, None, 1, 1), (x, 2)), names=("overlap", "donate_argnums"))
    add("device=0 (an int)", _under(None, (_twice,), (x,), pjit_kwargs={"device": 0}),
        names="device")
    add("device and backend", lambda: _under(None, (_twice,), (x,), pjit_kwargs={
        "device": jax.devices()[0], "backend": "cpu"})(), names=("device", "backend"))
    add("device with in_axis_resources", lambda: pmapkit.pjit(
        _twice, P("x"), device=jax.devices()[0])(x), names=("device", "in_axis_resources"))
    add("device=d3 (valid)", lambda: _under(None, (_twice,), (x,), pjit_kwargs={
        "device": jax.devices()[3]})(), ref=lambda: x * 2)
    add("pjit(1)", lambda: pmapkit.pjit(1, None, None), names=("callable", "fun"))
    add("pjit(f, bogus_keyword=1)", lambda: pmapkit.pjit(_twice, bogus_keyword=1),
        names="bogus_keyword")

    # -- the mesh ---------------------------------------------------------------------------
    add("no mesh active", _under(None, (_twice, P("x"), None), (x,)),
        expect=(RuntimeError, ValueError), names="mesh")
    add("undefined mesh axis P('z')", _under(mesh1d, (_twice, P("z"), None), (x,)),
        names=("z", "undefined"))
    add("out spec with undefined axis P('z')", _under(mesh1d, (_twice, None, P("z")), (x,)),
        names=("z", "undefined"))
    add("undefined axis under jax.set_mesh", lambda: _under_set_mesh(x),
        names=("z", "undefined"))
    add("Mesh with one name for 2 dimensions", lambda: pmapkit.Mesh(
        np.array(jax.devices()).reshape(2, 4), ("x",)), names=("name", "dimension", "axis"))
    add("Mesh with a name used twice", lambda: pmapkit.Mesh(
        np.array(jax.devices()).reshape(2, 4), ("x", "x")), names=("unique", "x"))
    add("Mesh of ints", lambda: _mesh_of_ints(x), names=("device", "Device", "int"))
    add("Mesh with no devices", lambda: _under(
        lambda: pmapkit.Mesh(np.array([], dtype=object), ("x",)), (_twice, P("x"), None),
        (x,))(), expect=(ValueError, RuntimeError, TypeError), names=("mesh", "empty", "device"))
    add("Mesh axis name 1 (an int)", lambda: pmapkit.Mesh(np.array(jax.devices()), (1,)),
        names=("axis", "name", "str"))

    # -- shapes against the mesh ------------------------------------------------------------------
    add("indivisible dimension 7 over 8", _under(mesh1d, (_twice, P("x"), None), (x8(n=7),)),
        names=("divisible", "7"))
    add("indivisible 6 over ('x', 'y')", _under(mesh2d, (_twice, P(("x", "y")), None),
                                                (x8(n=6),)), names=("divisible", "6"))
    add("rank 0 with P('x')", _under(mesh1d, (_twice, P("x"), None), (np.float32(1),)),
        names=("rank",))
    add("rank 1 with P('x', 'y')", _under(mesh2d, (_twice, P("x", "y"), None), (x,)),
        names=("rank",))
    add("in spec not a prefix of the arguments", _under(
        mesh1d, (_twice, (P("x"), P("x")), None), (x,)), names=("prefix", "in_axis_resources"))
    add("in spec dict for a tuple argument", _under(
        mesh1d, (lambda t: t[0], ({"a": P("x")},), None), ((x, x),)),
        names=("prefix", "in_axis_resources"))
    add("output rank 0 with P('x')", _under(mesh1d, (lambda v: v.sum(), None, P("x")), (x,)),
        names=("rank", "output"))
    add("output indivisible (3,) over 8", _under(
        mesh1d, (lambda v: v[:3], None, P("x")), (x,)), names=("divisible", "3"))
    add("out spec not a prefix of the output", _under(
        mesh1d, (_twice, None, (P("x"), P("x"))), (x,)), names=("prefix", "out_axis_resources"))

    # -- arguments -------------------------------------------------------------------------------
    add("keyword argument with in_axis_resources", _under(
        mesh1d, (_add, P("x"), None), (x,), kwargs={"b": x}),
        expect=(NotImplementedError, TypeError, ValueError), names=("keyword", "kwargs"),
        ref=lambda: x * 2)
    add("static_argnums=3 with one argument", _under(
        mesh1d, (_twice, None, None, 3), (x,)), names=("static_argnums", "positional"))
    add("donate_argnums=3 with one argument", _under(
        mesh1d, (_twice, None, None, None, 3), (x,)), names=("donate_argnums", "positional"))
    add("unhashable static argument", _under(
        mesh1d, (lambda a, k: a * len(k), None, None, 1), (x, [1, 2])),
        names=("hashable", "static"))
    add("unhashable static_argnames value", _under(
        mesh1d, (lambda a, k: a * len(k),), (x,), kwargs={"k": [1, 2]},
        pjit_kwargs={"static_argnames": "k"}), names=("hashable", "static"))
    for label, value in (("'s'", "s"), ("object()", object()), ("{1, 2}", {1, 2})):
        add(f"argument {label}", _under(mesh1d, (_add, None, None), (x, value)),
            names=("argument", "b", "type"))
    add("a deleted jax.Array", lambda: _deleted(x), expect=RuntimeError, match="deleted")
    add("an array committed to a device off the mesh", lambda: _off_mesh(x),
        names=("device", "mesh"), ref=lambda: x * 2)
    add("unknown keyword argument (no specs)", _under(mesh1d, (_twice,), (x,),
                                                       kwargs={"nope": x}),
        names=("nope", "keyword"))
    add("lower('s')", lambda: _lower_str(), names=("argument", "type", "str"))
    add("compiled called with another shape", lambda: _compiled_other_shape(x),
        names=("shape", "float32"))

    # -- results -----------------------------------------------------------------------------------
    for label, fun in (("'s'", lambda v: "s"), ("object()", lambda v: object()),
                       ("[x, 's'] ('s' at [1])", lambda v: [v, "s"])):
        add(f"body returns {label}", _under(mesh1d, (fun, P("x"), None), (x,)),
            names=("output", "return", "type"))
    add("body raises ValueError", _under(mesh1d, (_raises, P("x"), None), (x,)),
        expect=ValueError, match="from the body")

    # -- with_sharding_constraint -------------------------------------------------------------------
    add("with_sharding_constraint outside any trace", lambda: _wsc_outside(x),
        expect=(ValueError, RuntimeError), names=("with_sharding_constraint", "mesh", "trace"))
    add("with_sharding_constraint undefined axis", _under(
        mesh1d, (lambda v: pmapkit.with_sharding_constraint(v, P("z")), P("x"), None), (x,)),
        names=("z", "undefined"))
    add("with_sharding_constraint P('x', 'x')", _under(
        mesh2d, (lambda v: pmapkit.with_sharding_constraint(v, P("x", "x")), None, None),
        (x84,)), names=("x", "more than once", "twice", "multiple"))
    add("with_sharding_constraint of rank too small", _under(
        mesh1d, (lambda v: pmapkit.with_sharding_constraint(v.sum(), P("x")), None, None),
        (x,)), names=("rank",))
    add("error does not poison the function", lambda: _error_then_call(x))


def _raises(v):
    raise ValueError("from the body")


def _single_device_sharding(x):
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with mesh1d():
        return pmapkit.pjit(_twice, in_shardings=sharding)(x)


def _other_mesh_named(x):
    other = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
    with mesh1d():
        return pmapkit.pjit(_twice, in_shardings=NamedSharding(other, P("x")))(x)


def _under_set_mesh(x):
    jax_mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    with jax.set_mesh(jax_mesh):
        return pmapkit.pjit(_twice, P("z"), None)(x)


def _mesh_of_ints(x):
    with pmapkit.Mesh(np.arange(8), ("x",)):
        return pmapkit.pjit(_twice, P("x"), None)(x)


def _deleted(x):
    with mesh1d():
        y = pmapkit.pjit(_twice, P("x"), P("x"))(x)
        y.delete()
        return pmapkit.pjit(_twice, P("x"), P("x"))(y)


def _off_mesh(x):
    y = jax.device_put(x, jax.devices()[7])
    with pmapkit.Mesh(np.array(jax.devices()[:4]), ("x",)):
        return pmapkit.pjit(_twice, P("x"), None)(y)


def _lower_str():
    with mesh1d():
        return pmapkit.pjit(_twice, P("x"), None).lower("s")


def _compiled_other_shape(x):
    with mesh1d():
        compiled = pmapkit.pjit(_twice, P("x"), None).lower(x).compile()
        return compiled(x8(n=16))


def _wsc_outside(x):
    with mesh1d():
        return pmapkit.with_sharding_constraint(jnp.asarray(x), P("x"))


def _error_then_call(x):
    f = pmapkit.pjit(_twice, P("x"), P("x"))
    with mesh1d():
        for _ in range(2):
            try:
                f(x8(n=7))
            except ValueError:
                pass
            else:
                raise Wrong("an indivisible dimension was accepted")
        out = f(x)
    if not np.array_equal(np.asarray(out), x * 2):
        raise Wrong(f"after an error the next call returned {np.asarray(out)}")
    return Result("errors leave the function working")
