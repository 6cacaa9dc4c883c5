"""Scenarios of tests/test_donation_aliasing.py that would kill the process
if pmapkit let them run (XLA crashes when one buffer is two inputs of a call
and one of them is donated; jax.pmap does).

Run as a script (``python -P tests/_donation_aliasing_helpers.py``), in a
process of its own: it prints one JSON line per scenario as it finishes, so
a crash shows up as the missing lines of the scenarios it reached.
"""
import json
import os
import sys


def _setup():
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    jax.config.update("jax_enable_checks", True)
    return jax


jax = _setup()
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import pmapkit  # noqa: E402
from pmapkit import PartitionSpec as P  # noqa: E402

N = 8


def _placed(seed=0):
    """A fresh array sharded like pmap's inputs (so the hit path takes it as is)."""
    return jax.pmap(lambda v: v)(jnp.arange(N, dtype=jnp.float32) + seed)


def _expect_alias_error(call):
    try:
        call()
    except ValueError as exc:
        return {"raised": type(exc).__name__, "message": str(exc),
                "is_value_error": isinstance(exc, ValueError)}
    return {"raised": None}


def _pmap_both_donated():
    f = pmapkit.pmap(lambda a, b: (a + 1, b * 2), donate_argnums=(0, 1))
    x = _placed()
    out = _expect_alias_error(lambda: f(x, x))
    out["x_alive"] = not x.is_deleted() and float(x[1]) == 1.0
    return out


def _pmap_first_donated():
    f = pmapkit.pmap(lambda a, b: a + b, donate_argnums=0)
    x = _placed()
    return _expect_alias_error(lambda: f(x, x))


def _pmap_second_donated():
    f = pmapkit.pmap(lambda a, b: a - b, donate_argnums=1)
    x = _placed()
    return _expect_alias_error(lambda: f(x, x))


def _pmap_hit_path():
    f = pmapkit.pmap(lambda a, b: (a + 1, b * 2), donate_argnums=(0, 1))
    first = f(_placed(1), _placed(2))            # compiles, caches the signature
    x = _placed(3)
    out = _expect_alias_error(lambda: f(x, x))   # same signature: a hit
    out["x_alive"] = not x.is_deleted()
    again = f(_placed(4), _placed(5))            # the entry still serves calls
    out["after"] = [float(again[0][1]), float(again[1][1])]
    out["first"] = float(first[0][0])
    out["cache_size"] = f._cache_size
    return out


def _pmap_aliased_first_then_fine():
    # The first call of a signature aliases: nothing is compiled into the
    # cache as a failure; the next call compiles and caches normally.
    f = pmapkit.pmap(lambda a, b: a * b, donate_argnums=0)
    x = _placed(6)
    out = _expect_alias_error(lambda: f(x, x))
    y = f(_placed(1), _placed(2))
    out["after"] = float(y[1])
    out["cache_size"] = f._cache_size
    return out


def _pmap_pytree_positions():
    f = pmapkit.pmap(lambda t: t[0] + t[1], donate_argnums=0)
    x = _placed()
    return _expect_alias_error(lambda: f((x, x)))


def _pmap_keyword_argument():
    f = pmapkit.pmap(lambda a, b: a + b, donate_argnums=0)
    x = _placed()
    return _expect_alias_error(lambda: f(x, b=x))


def _pmap_static_argument_between():
    f = pmapkit.pmap(lambda a, k, c: a * k + c, static_broadcasted_argnums=1,
                     donate_argnums=2)
    x = _placed()
    return _expect_alias_error(lambda: f(x, 2.0, x))


def _pmap_key_arrays():
    f = pmapkit.pmap(lambda k1, k2: (jax.random.fold_in(k1, 1), jax.random.fold_in(k2, 2)),
                     donate_argnums=(0,))
    keys = jax.pmap(lambda k: k)(jax.random.split(jax.random.key(0), N))
    return _expect_alias_error(lambda: f(keys, keys))


def _pmap_key_arrays_hit():
    f = pmapkit.pmap(lambda k1, k2: (jax.random.fold_in(k1, 1), jax.random.fold_in(k2, 2)),
                     donate_argnums=(0, 1))
    fresh = lambda s: jax.pmap(lambda k: k)(jax.random.split(jax.random.key(s), N))
    f(fresh(1), fresh(2))
    keys = fresh(3)
    return _expect_alias_error(lambda: f(keys, keys))


def _mesh():
    return pmapkit.Mesh(np.array(jax.devices()[:4]), ("x",))


def _pjit_array(seed):
    s = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",)),
                                   P("x"))
    return jax.device_put(jnp.arange(8, dtype=jnp.float32) + seed, s)


def _pjit_both_donated():
    f = pmapkit.pjit(lambda a, b: (a + 1, b * 2), P("x"), P("x"), donate_argnums=(0, 1))
    x = _pjit_array(0)
    with _mesh():
        out = _expect_alias_error(lambda: f(x, x))
    out["x_alive"] = not x.is_deleted()
    return out


def _pjit_one_donated():
    f = pmapkit.pjit(lambda a, b: a + b, P("x"), P("x"), donate_argnums=1)
    x = _pjit_array(0)
    with _mesh():
        return _expect_alias_error(lambda: f(x, x))


def _pjit_hit_path():
    f = pmapkit.pjit(lambda a, b: a * b, P("x"), P("x"), donate_argnums=0)
    with _mesh():
        f(_pjit_array(1), _pjit_array(2))
        x = _pjit_array(3)
        out = _expect_alias_error(lambda: f(x, x))
        y = f(_pjit_array(1), _pjit_array(2))
    out["after"] = float(y[1])
    out["cache_size"] = f._cache_size
    return out


def _pjit_pytree():
    f = pmapkit.pjit(lambda t: t["a"] - t["b"], P("x"), P("x"), donate_argnums=0)
    x = _pjit_array(0)
    with _mesh():
        return _expect_alias_error(lambda: f({"a": x, "b": x}))


SCENARIOS = {
    "pmap_both_donated": _pmap_both_donated,
    "pmap_first_donated": _pmap_first_donated,
    "pmap_second_donated": _pmap_second_donated,
    "pmap_hit_path": _pmap_hit_path,
    "pmap_aliased_first_then_fine": _pmap_aliased_first_then_fine,
    "pmap_pytree_positions": _pmap_pytree_positions,
    "pmap_keyword_argument": _pmap_keyword_argument,
    "pmap_static_argument_between": _pmap_static_argument_between,
    "pmap_key_arrays": _pmap_key_arrays,
    "pmap_key_arrays_hit": _pmap_key_arrays_hit,
    "pjit_both_donated": _pjit_both_donated,
    "pjit_one_donated": _pjit_one_donated,
    "pjit_hit_path": _pjit_hit_path,
    "pjit_pytree": _pjit_pytree,
}


def main(names):
    for name in names or SCENARIOS:
        result = SCENARIOS[name]()
        print(json.dumps({"scenario": name, **result}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
