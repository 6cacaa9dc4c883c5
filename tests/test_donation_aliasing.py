"""One array in two argument positions, at least one donated: pmapkit raises a
clear ValueError naming both positions before anything runs, on the miss path
and on the hit path, for pmap and pjit. (jax.pmap and jax.jit hand XLA the one
buffer twice, and the process dies.)

The scenarios that would crash without the check run in a subprocess
(tests/_donation_aliasing_helpers.py), so a regression fails these tests
instead of killing the test run. Functions that donate nothing are unaffected:
passing one array twice to them is fine and stays on the hit path.
"""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit.core.programs import compiled_program

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "_donation_aliasing_helpers.py")
N = 8


@pytest.fixture(scope="module")
def scenarios():
    """Results of every crash-prone scenario, run in one fresh process."""
    proc = subprocess.run([sys.executable, "-P", HELPER], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row.pop("scenario")] = row
    return proc.returncode, results, proc.stderr[-3000:]


def _result(scenarios, name):
    rc, results, stderr = scenarios
    assert name in results, (
        f"scenario {name} did not finish (process exit code {rc}; a negative "
        f"code is a crash):\n{stderr}")
    return results[name]


def _assert_names(result, first, second, donated):
    assert result["raised"] == "ArgumentAliasError", result
    assert result["is_value_error"]
    msg = result["message"]
    assert f"passed as {first} and as {second}" in msg, msg
    assert donated in msg, msg
    assert "donate_argnums" in msg and "jnp.copy" in msg


def test_helper_process_did_not_crash(scenarios):
    rc, results, stderr = scenarios
    assert rc == 0, stderr
    from _donation_aliasing_helpers import SCENARIOS  # noqa: PLC0415
    assert set(results) == set(SCENARIOS)


A0 = "argument 'a' (positional argument 0)"
B1 = "argument 'b' (positional argument 1)"


def test_pmap_both_donated(scenarios):
    r = _result(scenarios, "pmap_both_donated")
    _assert_names(r, A0, B1, "both are donated")
    assert r["x_alive"]   # nothing ran: the array is neither donated nor deleted


def test_pmap_first_donated(scenarios):
    _assert_names(_result(scenarios, "pmap_first_donated"), A0, B1, f"{A0} is donated")


def test_pmap_second_donated(scenarios):
    _assert_names(_result(scenarios, "pmap_second_donated"), A0, B1, f"{B1} is donated")


def test_pmap_hit_path(scenarios):
    r = _result(scenarios, "pmap_hit_path")
    _assert_names(r, A0, B1, "both are donated")
    assert r["x_alive"]
    assert r["after"] == [6.0, 12.0]   # (4 + 1) + 1, (5 + 1) * 2
    assert r["first"] == 2.0
    assert r["cache_size"] == 1


def test_pmap_alias_error_does_not_poison_the_signature(scenarios):
    r = _result(scenarios, "pmap_aliased_first_then_fine")
    _assert_names(r, A0, B1, f"{A0} is donated")
    assert r["after"] == 6.0           # (1 + 1) * (1 + 2)
    assert r["cache_size"] == 1


def test_pmap_pytree_positions(scenarios):
    t = "argument 't' (positional argument 0)"
    _assert_names(_result(scenarios, "pmap_pytree_positions"), f"{t} at [0]",
                  f"{t} at [1]", "both are donated")


def test_pmap_keyword_argument(scenarios):
    _assert_names(_result(scenarios, "pmap_keyword_argument"), A0,
                  "keyword argument 'b'", f"{A0} is donated")


def test_pmap_static_argument_between(scenarios):
    c2 = "argument 'c' (positional argument 2)"
    _assert_names(_result(scenarios, "pmap_static_argument_between"), A0, c2,
                  f"{c2} is donated")


@pytest.mark.parametrize("name", ["pmap_key_arrays", "pmap_key_arrays_hit"])
def test_pmap_key_arrays(scenarios, name):
    k1 = "argument 'k1' (positional argument 0)"
    k2 = "argument 'k2' (positional argument 1)"
    r = _result(scenarios, name)
    _assert_names(r, k1, k2, "both are donated" if name.endswith("hit") else f"{k1} is donated")


def test_pjit_both_donated(scenarios):
    r = _result(scenarios, "pjit_both_donated")
    _assert_names(r, A0, B1, "both are donated")
    assert r["message"].startswith("pjit:")
    assert r["x_alive"]


def test_pjit_one_donated(scenarios):
    _assert_names(_result(scenarios, "pjit_one_donated"), A0, B1, f"{B1} is donated")


def test_pjit_hit_path(scenarios):
    r = _result(scenarios, "pjit_hit_path")
    _assert_names(r, A0, B1, f"{A0} is donated")
    assert r["after"] == 6.0
    assert r["cache_size"] == 1


def test_pjit_pytree(scenarios):
    t = "argument 't' (positional argument 0)"
    _assert_names(_result(scenarios, "pjit_pytree"), f"{t} at ['a']",
                  f"{t} at ['b']", "both are donated")


# -- in process: what must keep working ------------------------------------------------
@pytest.fixture
def fallbacks(monkeypatch):
    counter = {"n": 0}
    real = compiled_program.CompiledProgram.shard_fallback

    def counting(self, x, i):
        counter["n"] += 1
        return real(self, x, i)

    monkeypatch.setattr(compiled_program.CompiledProgram, "shard_fallback", counting)
    return counter


def _placed(seed=0):
    return jax.pmap(lambda v: v)(jnp.arange(N, dtype=jnp.float32) + seed)


def test_no_donation_same_array_twice_is_fine_and_fast(fallbacks):
    f = pmapkit.pmap(lambda a, b: a * b)
    ref = jax.pmap(lambda a, b: a * b)
    x = _placed(1)
    for _ in range(3):
        out = f(x, x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref(x, x)))
    assert f._cache_size == 1 and fallbacks["n"] == 0


def test_repeated_array_in_positions_not_donated_runs(fallbacks):
    f = pmapkit.pmap(lambda a, b, c: a + b * c, donate_argnums=0)
    x = _placed(2)
    for k in range(3):
        out = f(_placed(k), x, x)
        np.testing.assert_array_equal(np.asarray(out),
                                      np.arange(N) + k + (np.arange(N) + 2.0) ** 2)
    assert f._cache_size == 1 and fallbacks["n"] == 0
    assert not x.is_deleted()


def test_donated_distinct_arrays_are_consumed():
    f = pmapkit.pmap(lambda a, b: (a + b, a - b), donate_argnums=(0, 1))
    for _ in range(3):
        x, y = _placed(1), _placed(2)
        out = f(x, y)
        assert x.is_deleted() and y.is_deleted()
        np.testing.assert_array_equal(np.asarray(out[0]), 2 * np.arange(N) + 3.0)
        np.testing.assert_array_equal(np.asarray(out[1]), np.full(N, -1.0))


def test_numpy_array_twice_is_copied_per_position():
    # Host values are put on the devices once per position: no aliasing.
    f = pmapkit.pmap(lambda a, b: a - b, donate_argnums=0)
    h = np.arange(N, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(h, h)), np.zeros(N))


def test_python_scalars_are_not_arrays():
    # Small ints are one object in CPython; they are not buffers.
    f = pmapkit.pmap(lambda a, b, c: a * b + c, in_axes=(0, None, None),
                     donate_argnums=0)
    for k in range(2):
        np.testing.assert_array_equal(np.asarray(f(_placed(k), 3, 3)),
                                      (np.arange(N) + k) * 3 + 3.0)


def test_pjit_no_donation_same_array_twice():
    mesh = pmapkit.Mesh(np.array(jax.devices()[:4]), ("x",))
    f = pmapkit.pjit(lambda a, b: a * b, P("x"), P("x"))
    with mesh:
        x = f(jnp.arange(8.0), jnp.ones(8))
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(f(x, x)), np.arange(8.0) ** 2)
    assert f._cache_size == 1


def test_under_jit_donation_does_not_apply():
    # Inside an outer jit, the inner donation is moot: the outer program owns
    # its buffers, and the same array twice is fine.
    f = pmapkit.pmap(lambda a, b: a + b, donate_argnums=(0, 1))
    x = _placed(1)
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x, x)), 2 * (np.arange(N) + 1.0))
    assert not x.is_deleted()
