"""Bad inputs to ``pmapkit.colocated_python``: specs, devices, arguments and
results of the wrong kind."""
from __future__ import annotations

from stress.common import NamedSharding, P, Result, Wrong, jax, jnp, np

from pmapkit.colocated_python import (colocated_cpu_devices, colocated_python,
                                      colocated_python_class)

SECTION = "bad_inputs"


def _on(i, value):
    return jax.device_put(value, jax.devices()[i])


def _identity(x):
    return x


def _add_one(x):
    return x + 1


class _Counter:
    def __init__(self, start):
        self.total = start

    def add(self, x):
        self.total = self.total + x
        return self.total


class _Broken:
    def __init__(self):
        raise KeyError("cannot build")

    def get(self, x):
        return x


def register(reg):
    add = reg.section(SECTION, "colocated_python")
    d0 = lambda: jax.devices()[0]  # noqa: E731

    add("colocated_python(1)", lambda: colocated_python(1), names=("callable",))
    for label, value in (("an int", 1), ("a numpy array", np.arange(3)),
                         ("a list of floats", [1.0]), ("a str", "s")):
        add(f"called with {label}", lambda value=value: colocated_python(_identity)(value),
            names=("jax.Array",))
    add("arguments on two device lists", lambda: colocated_python(lambda a, b: a)(
        _on(0, jnp.ones(2)), _on(1, jnp.ones(2))), names=("device list",))
    add("no arguments, no devices", lambda: colocated_python(lambda: jnp.ones(2))(),
        names=("devices",))
    for label, make in (("'cpu'", lambda: "cpu"), ("[]", lambda: []),
                        ("[d0, 1] (mixed kinds)", lambda: [d0(), 1]),
                        ("a Device, not a list", d0), ("5", lambda: 5)):
        add(f"specialize(devices={label})", lambda make=make: colocated_python(
            _identity).specialize(devices=make()), names=("devices",))
    add("specialize(out_specs_fn=1)", lambda: colocated_python(_identity).specialize(
        out_specs_fn=1), names=("out_specs_fn",))
    add("specialize(in_specs='x')", lambda: colocated_python(_identity).specialize(
        in_specs="x"), names=("in_specs",))
    add("specialize(devices=...) twice", lambda: colocated_python(_identity).specialize(
        devices=[d0()]).specialize(devices=[d0()]), names=("devices", "already"))
    add("called with in_specs of another shape", lambda: colocated_python(_identity).specialize(
        in_specs=((jax.ShapeDtypeStruct((3,), jnp.float32, sharding=_sharding0()),), {}))(
        _on(0, jnp.ones(2))), names=("in_specs",))
    add("argument outside the specialized devices", lambda: colocated_python(
        _identity).specialize(devices=[d0()])(_on(5, jnp.ones(2))), names=("devices",))
    for label, fun in (("a numpy array", lambda x: np.asarray(x)), ("an int", lambda x: 1),
                       ("None next to an array", lambda x: (x, None)),
                       ("a str", lambda x: "s")):
        add(f"function returns {label}", lambda fun=fun: colocated_python(fun)(
            _on(0, jnp.ones(2))), names=("jax.Array", "output", "type"),
            **({"ref": lambda: (np.ones(2, np.float32), None)}
               if label.startswith("None") else {}))
    add("function returns another shape than out_specs_fn", lambda: colocated_python(
        lambda x: jnp.ones(5)).specialize(out_specs_fn=lambda s: s)(_on(0, jnp.ones(2))),
        names=("shape", "out_specs", "spec"))
    add("out_specs_fn returns 's'", lambda: colocated_python(_identity).specialize(
        out_specs_fn=lambda s: "s")(_on(0, jnp.ones(2))),
        names=("ShapeDtypeStruct", "out_specs"))
    add("function raises", lambda: colocated_python(_fail)(_on(0, jnp.ones(2))),
        expect=RuntimeError, match="colocated failure")
    add("called inside jax.jit", lambda: jax.jit(colocated_python(_add_one))(jnp.ones(2)),
        names=("jit", "trace", "transform"))
    add("sharded argument, correct result", lambda: colocated_python(_add_one)(
        jax.device_put(jnp.arange(8.0), NamedSharding(
            jax.sharding.Mesh(np.array(jax.devices()), ("x",)), P("x")))),
        ref=lambda: np.arange(8.0, dtype=np.float32) + 1)
    add("colocated_cpu_devices('x')", lambda: colocated_cpu_devices("x"), names=("Device",))
    add("colocated_cpu_devices([1, 2])", lambda: colocated_cpu_devices([1, 2]),
        names=("Device",))
    add("colocated_python_class(1)", lambda: colocated_python_class(1),
        names=("class", "type", "callable"))
    add("class method called with an int", lambda: colocated_python_class(_Counter)(
        np.float32(0)).add(1), names=("jax.Array",))
    add("class constructor raises (twice)", _broken_twice, expect=KeyError, match="cannot build")
    add("class keeps state", _counter_state)


def _fail(x):
    raise RuntimeError(f"colocated failure on shape {x.shape}")


def _sharding0():
    return jax.sharding.SingleDeviceSharding(jax.devices()[0])


def _broken_twice():
    obj = colocated_python_class(_Broken)()
    for _ in range(2):
        try:
            obj.get(_on(0, jnp.ones(2)))
        except KeyError:
            pass
        else:
            raise Wrong("a method of an object whose constructor raised returned")
    return obj.get(_on(0, jnp.ones(2)))


def _counter_state():
    obj = colocated_python_class(_Counter)(_on(0, jnp.float32(1)))
    x = _on(0, jnp.float32(2))
    for _ in range(3):
        out = obj.add(x)
    if float(out) != 7.0:
        raise Wrong(f"state after three adds of 2 to 1 is {float(out)}")
    return Result("state kept")
