"""JAX's debugging tools through pmapkit, differentially against JAX.

Each case runs one program through pmapkit (pmap, pjit under a mesh, their
AOT-compiled forms) and through its JAX equivalent (``jax.pmap``,
``jax.jit`` with the same ``NamedSharding``s, or ``jax.vmap`` where jax
0.10's pmap cannot run the case) and compares the outcomes: error or not,
the exception type, the message text both carry, and the values where there
is no error. pmapkit goes beyond jax.pmap where it says so: its
FloatingPointError also names the operation (re-run de-optimized, as
``jax.jit`` does) and the mapped index, and checkify handles nested pmaps,
index checks and an error flowing from one pmap into the next.

Flags are set per block with ``jax.debug_nans(True)`` (thread-local), so
nothing leaks into other tests. Arrays are tiny; compiles dominate.
"""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify
from jax.sharding import NamedSharding

import pmapkit
from pmapkit import PartitionSpec as P

N = 8
X = jnp.arange(float(N)) - 3.0          # log: nan at mapped indices 0, 1, 2
X2 = X.reshape(N, 1) * jnp.ones((1, 2))  # for the pjit cases
SHARDED_IN = "Invalid value (nan) encountered in sharded computation"


def outcome(fn, *args):
    """``("ok", values)`` or ``(exception type, message)``."""
    try:
        out = fn(*args)
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return type(exc), str(exc)
    return "ok", jax.tree_util.tree_map(np.asarray, out)


def same_values(a, b):
    jax.tree_util.tree_map(
        lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def assert_same_ok(ours, theirs):
    assert ours[0] == "ok" and theirs[0] == "ok", (ours, theirs)
    same_values(ours[1], theirs[1])


def log_step(v):
    return jnp.log(v) * 2.0


# -- debug_nans / debug_infs: pmap ------------------------------------------------
@pytest.mark.parametrize("cached", [True, False], ids=["cached", "fresh"])
def test_pmap_debug_nans_raises_like_jax_pmap_and_names_the_operation(cached):
    ours, theirs = pmapkit.pmap(log_step), jax.pmap(lambda v: jnp.log(v) * 2.0)
    if cached:  # built and run before the flag is turned on
        ours(X), theirs(X)
    with jax.debug_nans(True):
        got, want = outcome(ours, X), outcome(theirs, X)
    assert want[0] is FloatingPointError and got[0] is FloatingPointError
    assert want[1].startswith(SHARDED_IN) and SHARDED_IN in got[1]
    # Beyond jax.pmap: the operation (as jax.jit names it) and where.
    assert got[1].startswith("invalid value (nan) encountered in log"), got[1]
    assert "output 0 of pmap of log_step holds it at mapped indices 0, 1, 2 " in got[1]
    # Flag off again: the same program, no error, the same NaNs as jax.pmap.
    assert_same_ok(outcome(ours, X), outcome(theirs, X))


def test_cached_wrapper_hit_path_after_flag():
    """Calls made while the flag is on take Python (checked) and cache
    nothing; with the flag off again the hit path is back."""
    f = pmapkit.pmap(lambda v: v * 3.0)
    f(X)
    f(X)
    misses = f._debug_dispatch_stats()["misses"]
    # A host value: a device array would be resliced by JAX, whose slicing
    # is checked too (jax.pmap raises there as well).
    bad = np.asarray(X.at[1].set(jnp.nan))
    with jax.debug_nans(True):
        np.testing.assert_array_equal(f(X), np.asarray(X) * 3.0)
        with pytest.raises(FloatingPointError, match=r"in mul .* at mapped index 1 \(device 1\)"):
            f(bad)
    checked = f._debug_dispatch_stats()["misses"]
    assert checked == misses + 2
    f(X)
    assert f._debug_dispatch_stats()["misses"] == checked
    assert f._cache_size == 1


@pytest.mark.parametrize("how", ["config_update", "context", "infs_update"])
def test_each_way_of_turning_a_flag_on_reaches_a_cached_wrapper(how):
    """The hit path reads no flag until one is turned on: each way of
    turning one on must tell it (JAX's config hooks)."""
    from pmapkit.core.programs import special_values
    f = pmapkit.pmap(jnp.log)   # on X: nan at mapped indices 0..2, -inf at 3
    f(X)
    f(X)
    special_values.rearm_from_flags()  # as before any flag was ever on
    name = "jax_debug_infs" if how == "infs_update" else "jax_debug_nans"
    expected = (r"Invalid value \(inf\) .* at mapped index 3 " if how == "infs_update"
                else r"Invalid value \(nan\) .* at mapped indices 0, 1, 2 ")
    try:
        if how == "context":
            with jax.debug_nans(True), pytest.raises(FloatingPointError, match=expected):
                f(X)
        else:
            jax.config.update(name, True)
            with pytest.raises(FloatingPointError, match=expected):
                f(X)
    finally:
        jax.config.update(name, False)
    np.testing.assert_array_equal(f(X), jnp.log(X))


def test_pmap_debug_infs_like_jax_pmap():
    body = lambda v: 1.0 / v  # noqa: E731
    x = jnp.arange(float(N))
    with jax.debug_infs(True):
        got = outcome(pmapkit.pmap(body), x)
        want = outcome(jax.pmap(body), x)
    assert got[0] is want[0] is FloatingPointError
    assert "Invalid value (inf) encountered in sharded computation" in want[1]
    assert got[1].startswith("invalid value (inf) encountered in div")
    assert "at mapped index 0 (device 0)" in got[1]


def with_callback(v):
    jax.debug.callback(lambda a: None, v)  # a program with effects
    return jnp.log(v)


@pytest.mark.parametrize("case", ["psum", "out_axes_none", "inside_jit", "grad",
                                  "callback"])
def test_pmap_debug_nans_cases_like_jax_pmap(case):
    body = lambda v: jax.lax.psum(jnp.log(v), "i")  # noqa: E731
    x = X
    if case == "psum":
        run = lambda pm: pm(body, "i")  # noqa: E731
    elif case == "callback":
        run = lambda pm: pm(with_callback)  # noqa: E731
    elif case == "out_axes_none":
        run = lambda pm: pm(jnp.log, out_axes=None)  # noqa: E731
    elif case == "inside_jit":
        run = lambda pm: jax.jit(lambda v: pm(jnp.log)(v) + 1.0)  # noqa: E731
    else:  # NaN in the backward pass only: d/dv sqrt(v) * 0 at v = 0
        x = jnp.zeros(N)
        run = lambda pm: jax.grad(lambda v: pm(lambda u: jnp.sqrt(u) * 0.0)(v).sum())  # noqa: E731
    with pytest.warns(UserWarning, match="includes a pmap") if case == "inside_jit" \
            else _no_warning_check():
        with jax.debug_nans(True):
            got = outcome(run(pmapkit.pmap), x)
    with jax.debug_nans(True):
        want = outcome(run(jax.pmap), x)
    assert got[0] is want[0] is FloatingPointError, (got, want)
    assert "encountered in" in want[1]
    assert SHARDED_IN in got[1] and "de-optimized" in got[1]
    assert got[1].startswith("invalid value (nan) encountered in " +
                             ("mul" if case == "grad" else "log")), got[1]
    assert_same_ok(outcome(run(pmapkit.pmap), x), outcome(run(jax.pmap), x))


class _no_warning_check:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_nested_pmap_debug_nans():
    """jax 0.10's pmap cannot nest; the reference is vmap of vmap under the
    flag (JAX checks each operation)."""
    body = jnp.sqrt
    y = X.reshape(2, 4)
    ours = pmapkit.pmap(pmapkit.pmap(body, "j"), "i")
    ours(y)
    with jax.debug_nans(True):
        got = outcome(ours, y)
        want = outcome(jax.vmap(jax.vmap(body)), y)
    assert got[0] is want[0] is FloatingPointError
    assert got[1].startswith(want[1])  # "invalid value (nan) encountered in sqrt"
    assert "at mapped indices (0, 0), (0, 1), (0, 2) (devices 0, 1, 2)" in got[1]


def test_clean_and_integer_outputs_pass_under_the_flags():
    body = lambda v, k: (jnp.exp(v), k // 2)  # noqa: E731
    k = jnp.arange(N, dtype=jnp.int32)
    with jax.debug_nans(True), jax.debug_infs(True):
        assert_same_ok(outcome(pmapkit.pmap(body), X, k), outcome(jax.pmap(body), X, k))


def test_nan_not_reproduced_de_optimized():
    """A NaN that comes in as an input: the de-optimized run makes none, and
    the error says so (jax.jit's wording is the model)."""
    x = np.asarray(X.at[4].set(jnp.nan))  # a host value (see above)
    with jax.debug_nans(True):
        got = outcome(pmapkit.pmap(lambda v: v), x)
        want = outcome(jax.jit(lambda v: v), x)
    assert got[0] is want[0] is FloatingPointError
    assert "de-optimized" in want[1] and "de-optimized" in got[1]
    assert "did not produce invalid values" in want[1]
    assert "produced no invalid value" in got[1] and "mapped index 4 (device 4)" in got[1]


def test_donation_stays_off_under_debug_nans_like_jax_pmap():
    results = {}
    for name, pm in [("jax", jax.pmap), ("pmapkit", pmapkit.pmap)]:
        f = pm(lambda v: v + 1.0, donate_argnums=0)
        b = f(jnp.arange(float(N)))
        f(b)
        with jax.debug_nans(True):
            c = f(jnp.arange(float(N)))
            f(c)
        results[name] = (b.is_deleted(), c.is_deleted())
    assert results["pmapkit"] == results["jax"] == (True, False)


def test_aot_compiled_pmap_raises_floating_point_error():
    """jax 0.10 leaks its internal error class from an AOT-compiled call;
    pmapkit raises FloatingPointError, as jax.jit's own call does."""
    compiled = pmapkit.pmap(log_step).lower(X).compile()
    with jax.debug_nans(True):
        got = outcome(compiled, X)
        jit_got = outcome(jax.jit(log_step), X)
        aot_jax = outcome(jax.jit(log_step).lower(X).compile(), X)
    assert got[0] is jit_got[0] is FloatingPointError
    assert aot_jax[0] is not FloatingPointError  # JAX's InternalFloatingPointError
    assert got[1].startswith(jit_got[1])  # "invalid value (nan) encountered in log"
    assert_same_ok(outcome(compiled, X), outcome(jax.jit(log_step), X))


# -- debug_nans: pjit under a mesh (maps.mesh, the classic context) --------------------
@pytest.fixture(scope="module")
def mesh():
    return pmapkit.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))


def _pjit_pair(mesh, fun):
    ours = pmapkit.pjit(fun, in_axis_resources=P("x"), out_axis_resources=P("x"))
    sharding = NamedSharding(mesh, P("x"))
    theirs = jax.jit(fun, in_shardings=sharding, out_shardings=sharding)

    def run_ours(*args):
        with pmapkit.maps.mesh(mesh.devices, mesh.axis_names):
            return ours(*args)

    return run_ours, theirs


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "fresh"])
def test_pjit_debug_nans_like_jax_jit(mesh, cached):
    ours, theirs = _pjit_pair(mesh, log_step)
    if cached:
        ours(X2), theirs(X2)
    with jax.debug_nans(True):
        got, want = outcome(ours, X2), outcome(theirs, X2)
    assert got[0] is want[0] is FloatingPointError
    assert want[1] == "invalid value (nan) encountered in log"
    assert got[1].startswith(want[1])
    assert "output 0 of pjit of log_step holds it on devices 0, 1, 2, 3" in got[1]
    assert_same_ok(outcome(ours, X2), outcome(theirs, X2))


# -- checkify ---------------------------------------------------------------------------
def checked(fn, errors, *args):
    """``("ok", err.get(), values)`` of ``checkify(fn, errors)(*args)``, or
    the exception's ``(type, message)``."""
    try:
        err, out = checkify.checkify(fn, errors=errors)(*args)
        return "ok", err.get(), jax.tree_util.tree_map(np.asarray, out)
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)


def checked_per_instance(fn, errors, x, depth=1):
    """``checked`` of ``vmap(checkify(fn))`` (``depth`` vmaps): one error per
    instance, the reference for what a pmap reports ("at mapped index i")."""
    run = checkify.checkify(fn, errors=errors)
    for _ in range(depth):
        run = jax.vmap(run)
    err, out = jax.jit(run)(x)  # one compile, not one per operation
    return "ok", err.get(), jax.tree_util.tree_map(np.asarray, out)


def assert_same_check(ours, theirs):
    assert ours[0] == theirs[0] == "ok", (ours, theirs)
    assert ours[1] == theirs[1], (ours[1], theirs[1])
    same_values(ours[2], theirs[2])


def too_big(v):
    checkify.check(v < 5, "too big: {}", v)
    return v * 2.0


def out_of_bounds(v):
    """Instance i reads element i of a one-element array."""
    return v.reshape(1)[v.astype(jnp.int32)]


def log_div(v):
    return jnp.log(v) + (10 // v.astype(jnp.int32)).astype(v.dtype)


Y = jnp.arange(float(N)) * 4.0  # too_big fails at mapped indices 2..7
ERRORS = {"user": checkify.user_checks, "float": checkify.float_checks,
          "nan": checkify.nan_checks, "div": checkify.div_checks,
          "index": checkify.index_checks, "all": checkify.all_checks}


@pytest.mark.parametrize("errors", ["user", "all", "float"])
def test_checkify_user_check_in_pmap_like_jax_pmap(errors):
    got = checked(pmapkit.pmap(too_big), ERRORS[errors], Y)
    want = checked(jax.pmap(too_big), ERRORS[errors], Y)
    assert_same_check(got, want)
    if errors != "float":
        assert "at mapped index 5: too big: 20.0 (`check` failed)" in got[1]
    else:
        assert got[1] is None


@pytest.mark.parametrize("errors", ["nan", "div", "all"])
def test_checkify_automatic_checks_in_pmap_like_jax_pmap(errors):
    x = X.at[6].set(0.0)  # nan (log) at 0..2, division by zero at 3 and 6
    got = checked(pmapkit.pmap(log_div), ERRORS[errors], x)
    want = checked(jax.pmap(log_div), ERRORS[errors], x)
    assert_same_check(got, want)
    assert got[1] is not None


def test_checkify_index_checks_in_pmap_like_vmap():
    """jax.pmap crashes on this one ("foreach() argument 2 is shorter");
    vmap is the per-instance reference."""
    x = jnp.arange(float(N))
    got = checked(pmapkit.pmap(out_of_bounds), checkify.index_checks, x)
    want = checked_per_instance(out_of_bounds, checkify.index_checks, x)
    assert_same_check(got, want)
    assert "at mapped index 7: out-of-bounds indexing" in got[1]
    assert checked(jax.pmap(out_of_bounds), checkify.index_checks, x)[0] is ValueError


@pytest.mark.parametrize("case", ["clean", "cached", "out_axes_none", "in_jit",
                                  "jit_of_checkify"])
def test_checkify_pmap_variants_like_jax_pmap(case):
    errors, x = checkify.all_checks, Y
    if case == "clean":
        make, x = (lambda pm: pm(too_big)), jnp.zeros(N)
    elif case == "cached":
        ours = pmapkit.pmap(log_step)
        ours(jnp.ones(N))  # compiled and cached unchecked first
        make, x = (lambda pm: ours if pm is pmapkit.pmap else pm(log_step)), X
    elif case == "out_axes_none":
        make = lambda pm: pm(too_big, out_axes=None)  # noqa: E731
    elif case == "in_jit":
        make = lambda pm: jax.jit(lambda v: pm(too_big)(v))  # noqa: E731
    else:
        run = {}
        for name, pm in [("ours", pmapkit.pmap), ("theirs", jax.pmap)]:
            err, out = jax.jit(checkify.checkify(pm(too_big)))(x)
            run[name] = ("ok", err.get(), np.asarray(out))
        assert_same_check(run["ours"], run["theirs"])
        assert "at mapped index 7: too big: 28.0" in run["ours"][1]
        return
    with pytest.warns(UserWarning) if case == "in_jit" else _no_warning_check():
        got = checked(make(pmapkit.pmap), errors, x)
    assert_same_check(got, checked(make(jax.pmap), errors, x))
    assert (got[1] is None) == (case == "clean")


def test_checkify_nested_pmap_like_vmap_of_vmap():
    y = Y.reshape(2, 4)
    got = checked(pmapkit.pmap(pmapkit.pmap(too_big, "j"), "i"), checkify.user_checks, y)
    want = checked_per_instance(too_big, checkify.user_checks, y, depth=2)
    assert_same_check(got, want)
    assert "at mapped index 1, 1: too big: 20.0" in got[1]


def test_checkify_error_flows_from_one_pmap_into_the_next():
    """Beyond jax.pmap (it raises "select cases must have the same shapes"):
    instance i of the second pmap goes on from instance i's error, as two
    vmaps in a row do; so does grad, whose backward pass is a second pmap."""
    two = lambda pm: lambda v: pm(too_big)(pm(too_big)(v) / 8.0)  # noqa: E731
    got = checked(two(pmapkit.pmap), checkify.user_checks, Y)
    assert_same_check(got, checked_per_instance(two(lambda f: f), checkify.user_checks, Y))
    assert checked(two(jax.pmap), checkify.user_checks, Y)[0] is TypeError
    got = checked(jax.grad(lambda v: pmapkit.pmap(too_big)(v).sum()), checkify.user_checks, Y)
    assert_same_check(got, checked_per_instance(jax.grad(too_big), checkify.user_checks, Y))
    assert "at mapped index 7: too big: 28.0" in got[1]


def test_checkify_mapped_error_into_pjit_is_refused_clearly(mesh):
    """A pmap's per-instance error cannot merge with a check of a later pjit:
    JAX's jit refuses too; pmapkit's TypeError says why."""
    def later(v):
        checkify.check(jnp.all(v < 100), "way too big: {}", v.max())
        return jnp.sin(v) * 2.0

    ours = pmapkit.pjit(later, P("x"), P("x"))
    with pmapkit.maps.mesh(mesh.devices, mesh.axis_names):
        got = checked(lambda v: ours(pmapkit.pmap(too_big)(v)), checkify.all_checks, Y)
    want = checked(lambda v: jax.jit(later)(jax.pmap(too_big)(v)), checkify.all_checks, Y)
    assert got[0] is want[0] is TypeError
    assert "select cases must have the same shapes" in want[1]
    assert got[1].startswith("checkify through pjit of later: the error value coming in")
    assert want[1] in got[1]


@pytest.mark.parametrize("errors", ["user", "index", "all"])
def test_checkify_pjit_like_jax_jit(mesh, errors):
    def body(v):
        checkify.check(jnp.all(v < 3), "too big: {}", v.max())
        return jnp.log(v) + (1 // v.astype(jnp.int32)).astype(v.dtype) + v[jnp.int32(20), 0]

    ours, theirs = _pjit_pair(mesh, body)
    got = checked(ours, ERRORS[errors], X2)
    assert_same_check(got, checked(theirs, ERRORS[errors], X2))
    assert got[1] is not None
    if errors != "all":
        return
    clean = jnp.ones((N, 2))
    clean_got = checked(ours, ERRORS[errors] - checkify.index_checks, clean)
    assert_same_check(clean_got, checked(theirs, ERRORS[errors] - checkify.index_checks, clean))
    assert clean_got[1] is None


# -- log_compiles and explain_cache_misses (JAX's loggers, through our inner jit) ----
def test_log_compiles_logs_each_compile_once(caplog):
    f = pmapkit.pmap(lambda v: v * 7.0)
    with caplog.at_level(logging.WARNING), jax.log_compiles(True):
        f(X)
        first = [r.getMessage() for r in caplog.records]
        caplog.clear()
        f(X)
    assert any(m.startswith("Compiling jit(pmap_<lambda>)") for m in first), first
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()]


def test_explain_cache_misses_logs_misses_only(caplog):
    f = pmapkit.pmap(lambda v: v * 9.0)
    with caplog.at_level(logging.WARNING), jax.explain_cache_misses(True):
        f(X)
        first = [r.getMessage() for r in caplog.records]
        caplog.clear()
        f(X)
        hits = [r.getMessage() for r in caplog.records]
    assert any("TRACING CACHE MISS" in m for m in first), first
    assert not any("CACHE MISS" in m for m in hits), hits
