"""The dispatch core, observed through ``pmapkit.pmap``.

These tests pin what DESIGN.md section 3 promises about the per-function
cache, the hit path, thread safety, transformations, introspection, donation
and outputs. They use only the public/introspection surface of the pmapped
object (``_cache_size``, ``_debug_cache_keys`` ...) plus two spies on the
Python miss path (``pmap._prepare`` and ``compiling.compile_pmap``), so they run
unchanged against the compiled core and the pure-Python twin
(``tests/test_pure_python_mode.py`` re-runs this file with
``PMAPKIT_PUREPYTHON=1``).

Bodies are tiny and most tests compile one or two programs: compilation
dominates the runtime.
"""
import importlib
import functools
import inspect
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import pmapkit
from pmapkit.core.programs import compiling

# ``pmapkit.pmap`` is the function (re-exported by the package), which shadows
# the submodule of the same name; the module itself is here.
pmap_module = importlib.import_module("pmapkit.pmap._pmap")

N = len(jax.devices())  # 8, forced by conftest

# Joins and waits are bounded so a deadlocked dispatch fails instead of hanging.
JOIN_TIMEOUT = 120


def farange(*shape, dtype=np.float32, start=0):
    return (np.arange(np.prod(shape)) + start).reshape(shape).astype(dtype)


class MissSpy:
    """Counts entries into the Python miss path: ``_prepare`` (validate and
    trace) and ``compiling.compile_pmap`` (compile). The hit path enters
    neither."""

    def __init__(self, monkeypatch):
        self.prepare = 0
        self.compile = 0
        real_prepare = pmap_module._prepare
        real_compile = compiling.compile_pmap

        def prepare(*a, **k):
            self.prepare += 1
            return real_prepare(*a, **k)

        def compile_pmap(*a, **k):
            self.compile += 1
            return real_compile(*a, **k)

        # pmap.py looks both up at call time (module global / module attribute).
        monkeypatch.setattr(pmap_module, "_prepare", prepare)
        monkeypatch.setattr(compiling, "compile_pmap", compile_pmap)

    def reset(self):
        self.prepare = self.compile = 0


@pytest.fixture
def spy(monkeypatch):
    return MissSpy(monkeypatch)


def counted(fn):
    """Wrap ``fn`` so that ``wrapper.traces`` counts how often it is traced."""
    lock = threading.Lock()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with lock:
            wrapper.traces += 1
        return fn(*args, **kwargs)

    wrapper.traces = 0
    return wrapper


def run_bounded(fn, timeout=JOIN_TIMEOUT):
    """Run ``fn`` in a daemon thread; return its result or re-raise its error.
    Fails (rather than hangs) if it does not finish within ``timeout``."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "call did not return: dispatch hang"
    if "error" in box:
        raise box["error"]
    return box["result"]


# ------------------------------------------------------------------ cache --

def test_repeated_calls_share_one_entry():
    f = pmapkit.pmap(lambda v: v * 2)
    x = farange(N, 3)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), x * 2)
    assert f._cache_size == 1


def test_output_fed_back_takes_the_fast_path(spy):
    f = pmapkit.pmap(lambda v: v + 1)
    x = f(farange(N, 3))
    assert (spy.prepare, spy.compile) == (1, 1)
    spy.reset()
    for _ in range(3):
        x = f(x)
    np.testing.assert_array_equal(np.asarray(x), farange(N, 3) + 4)
    assert f._cache_size == 1
    # The device output already has the sharding f was compiled for: these
    # calls never enter the Python miss path.
    assert (spy.prepare, spy.compile) == (0, 0)


def test_numpy_float32_and_device_output_share_an_entry(spy):
    # A canonical-dtype numpy leaf signs like the device array of its aval, so
    # the first (numpy) call's entry serves the later device-array calls.
    f = pmapkit.pmap(lambda v: v * 3)
    x = farange(N, 2)
    y = f(x)
    spy.reset()
    z = f(y)
    assert f._cache_size == 1
    assert spy.prepare == 0
    np.testing.assert_array_equal(np.asarray(z), x * 9)
    assert f._debug_cache_keys().startswith("The cache contains 1 elements:")
    assert f._debug_compute_cache_key(x) == f._debug_compute_cache_key(y)


def test_second_identical_call_skips_trace_and_compile(spy):
    body = counted(lambda v: v - 1)
    f = pmapkit.pmap(body)
    x = farange(N, 4)
    f(x)
    assert (body.traces, spy.prepare, spy.compile) == (1, 1, 1)
    out = f(x)
    # Neither the user function nor any Python of the miss path ran again.
    assert (body.traces, spy.prepare, spy.compile) == (1, 1, 1)
    np.testing.assert_array_equal(np.asarray(out), x - 1)


def test_new_shape_and_dtype_add_entries():
    f = pmapkit.pmap(lambda v: v + 1)
    f(farange(N, 2))
    f(farange(N, 3))
    assert f._cache_size == 2
    out = f(farange(N, 3, dtype=np.int32))
    assert out.dtype == np.int32
    assert f._cache_size == 3


@pytest.mark.parametrize("ndev", [1, N])
def test_the_last_numpy_signature_is_reused_only_for_its_dtype_and_shape(ndev):
    # A one-leaf numpy call reuses the last numpy leaf's signature when its
    # dtype and shape are the same (compiled: asked in C); any other dtype,
    # shape or rank signs anew, never runs another's program.
    f = pmapkit.pmap(lambda v: v + 1, devices=jax.devices()[:ndev])
    calls = [
        farange(ndev, 4), farange(ndev, 4), farange(ndev, 6),
        farange(ndev, 6).reshape(ndev, 2, 3), farange(ndev, 6).reshape(ndev, 3, 2),
        farange(ndev, 6, dtype=np.int32), farange(ndev, 6, dtype=np.float64),
        farange(ndev, 4)[:, ::-1], farange(ndev, 4),
    ]
    for x in calls:
        out = f(x)
        assert out.shape == x.shape
        np.testing.assert_array_equal(np.asarray(out), x + 1)
    assert f._cache_size == 6


def test_weak_type_adds_an_entry():
    # Same dtype and shape, different weak_type: the hit path must not reuse
    # a program compiled for the other one.
    f = pmapkit.pmap(lambda v, s: v * s, in_axes=(0, None))
    x = farange(N, 2)
    weak = jnp.asarray(2.0)
    strong = jnp.array(2.0, dtype=jnp.float32)
    assert weak.aval.weak_type and not strong.aval.weak_type
    np.testing.assert_array_equal(np.asarray(f(x, weak)), x * 2)
    np.testing.assert_array_equal(np.asarray(f(x, strong)), x * 2)
    assert f._cache_size == 2
    assert (f._debug_compute_cache_key(x, weak)
            != f._debug_compute_cache_key(x, strong))


def test_static_value_adds_an_entry():
    f = pmapkit.pmap(lambda v, k: v * k, static_broadcasted_argnums=1)
    x = farange(N, 2)
    np.testing.assert_array_equal(np.asarray(f(x, 2)), x * 2)
    np.testing.assert_array_equal(np.asarray(f(x, 3)), x * 3)
    np.testing.assert_array_equal(np.asarray(f(x, 2)), x * 2)
    assert f._cache_size == 2


def test_static_values_of_different_types_do_not_share_an_entry():
    # 1, True and 1.0 hash and compare equal; the key must also hold the type
    # (as jax.jit's does), or the program traced for one serves the others.
    f = pmapkit.pmap(lambda v, k: v * (10 if isinstance(k, bool) else 3),
                     static_broadcasted_argnums=1)
    x = farange(N)
    np.testing.assert_array_equal(np.asarray(f(x, 1)), x * 3)
    np.testing.assert_array_equal(np.asarray(f(x, True)), x * 10)


def test_python_scalar_values_share_an_entry():
    # An unmapped Python scalar signs by type only; its value is a runtime input.
    body = counted(lambda v, s: v * s)
    f = pmapkit.pmap(body, in_axes=(0, None))
    x = farange(N)
    for s in (2.0, 3.0, 4.0):
        np.testing.assert_array_equal(np.asarray(f(x, s)), x * s)
    assert body.traces == 1 and f._cache_size == 1


def test_numpy_scalar_values_share_an_entry():
    # Unsigned leaves would send every call through cache_miss, which
    # retraces and recompiles (~70 ms a call).
    body = counted(lambda v, s: v * s)
    f = pmapkit.pmap(body, in_axes=(0, None))
    x = farange(N)
    for s in (2.0, 3.0, 4.0):
        np.testing.assert_array_equal(np.asarray(f(x, np.float32(s))), x * s)
    assert body.traces == 1


def test_kwarg_name_adds_an_entry():
    f = pmapkit.pmap(lambda **kw: sum(kw.values()))
    x = farange(N, 2)
    np.testing.assert_array_equal(np.asarray(f(a=x)), x)
    np.testing.assert_array_equal(np.asarray(f(b=x)), x)
    assert f._cache_size == 2
    f(a=x)
    assert f._cache_size == 2


def test_pytree_structure_adds_an_entry():
    f = pmapkit.pmap(lambda t: t[0] + t[1])
    x = farange(N, 2)
    f((x, x))
    f([x, x])
    assert f._cache_size == 2
    f((x, x))
    assert f._cache_size == 2


def test_x64_toggle_selects_another_entry():
    # jax_enable_x64 is part of the trace context: a program compiled for one
    # setting must not serve the other (a Python int leaf changes width).
    f = pmapkit.pmap(lambda v, k: v + k, in_axes=(0, None))
    x = np.arange(N)
    assert f(x, 1).dtype == np.int32
    prev = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        assert f(x, 1).dtype == np.int64
    finally:
        jax.config.update("jax_enable_x64", prev)
    assert f(x, 1).dtype == np.int32
    assert f._cache_size == 2


def test_clear_cache_empties_and_refills(spy):
    f = pmapkit.pmap(lambda v: v * 2)
    x = farange(N)
    f(x)
    f(farange(N, 2))
    assert f._cache_size == 2
    f.clear_cache()
    assert f._cache_size == 0
    assert f._debug_cache_keys() == "The cache contains 0 elements:"
    spy.reset()
    np.testing.assert_array_equal(np.asarray(f(x)), x * 2)
    assert f._cache_size == 1 and spy.prepare == 1


def test_debug_cache_keys_and_compute_cache_key():
    f = pmapkit.pmap(lambda v: v + 1)
    x = farange(N, 3)
    assert f._debug_cache_keys() == "The cache contains 0 elements:"
    f(x)
    described = f._debug_cache_keys()
    assert described.startswith("The cache contains 1 elements:")
    assert "float32[8,3]" in described
    key = f._debug_compute_cache_key(x)
    assert key == f._debug_compute_cache_key(farange(N, 3))
    assert hash(key) == hash(f._debug_compute_cache_key(farange(N, 3)))
    other = f._debug_compute_cache_key(farange(N, 4))
    assert other is not None and other != key
    # Computing a key neither calls nor caches anything.
    assert f._cache_size == 1


# ----------------------------------------------------------- transformations --

def _primitive_names(jaxpr):
    """Primitive names in ``jaxpr`` and every jaxpr nested in its params (the
    pmap equation may sit inside a wrapper such as a ``jit`` equation)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for value in eqn.params.values():
            if hasattr(value, "eqns") or hasattr(getattr(value, "jaxpr", None), "eqns"):
                names += _primitive_names(value)
    return names


def test_make_jaxpr_binds_the_primitive():
    f = pmapkit.pmap(lambda v: v * 2, axis_name="i")
    x = farange(N, 2)
    jaxpr = jax.make_jaxpr(f)(x)
    assert "pmapkit_pmap" in _primitive_names(jaxpr)
    # Tracing is not a call: nothing was cached.
    assert f._cache_size == 0


def test_jit_of_pmap_takes_python_and_binds_the_primitive(spy):
    f = pmapkit.pmap(lambda v: v - jax.lax.pmean(v, "i"), axis_name="i")
    x = farange(N, 3)
    want = x - x.mean(0, keepdims=True)
    y = f(x)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6)
    assert f._cache_size == 1
    spy.reset()
    assert "pmapkit_pmap" in _primitive_names(jax.make_jaxpr(jax.jit(f))(x))
    # Same avals as the cached entry, yet the tracer call took Python and
    # bound our primitive (reusing the body traced for that signature: no
    # re-trace, no re-validation); the cache did not grow.
    assert spy.prepare == 0
    assert f._cache_size == 1
    # An input already sharded over the pmap's devices runs right under jit.
    np.testing.assert_allclose(np.asarray(jax.jit(f)(y)), want - want.mean(0),
                               rtol=1e-5, atol=1e-5)
    assert f._cache_size == 1


def test_jit_of_pmap_on_host_input_is_right():
    # The enclosing jit must learn the pmap's devices (a one-device outer
    # program once failed with an unlowered xla.sdy.GlobalToLocalShape).
    f = pmapkit.pmap(lambda v: v * 2 + jax.lax.psum(1, "i"), axis_name="i")
    x = farange(N, 3)
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), x * 2 + N)


def test_call_with_numpy_inside_jit_does_not_cache():
    f = pmapkit.pmap(lambda v: v * 2)
    x = farange(N, 2)  # a closed-over constant, not a tracer

    def outer():
        return f(x) + 1

    # The call is under a trace though no argument is a tracer: it must bind
    # the primitive rather than consult (or fill) the cache.
    assert "pmapkit_pmap" in _primitive_names(jax.make_jaxpr(outer)())
    assert f._cache_size == 0


def test_call_with_numpy_inside_jit_is_right():
    f = pmapkit.pmap(lambda v: v * 2)
    x = farange(N, 2)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda: f(x) + 1)()), x * 2 + 1)
    assert f._cache_size == 0


# ---------------------------------------------------------------- threads --

N_THREADS = 8


def _start_and_join(worker):
    threads = [threading.Thread(target=worker, args=(t,), daemon=True)
               for t in range(N_THREADS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "threads hung in dispatch"


def test_threads_compile_each_signature_once():
    # No collectives in the body: thousands of in-flight collective programs
    # can deadlock XLA:CPU on a 2-core machine; block on every result too.
    body = counted(lambda v: v * 2 + 1)
    f = pmapkit.pmap(body)
    inputs = [farange(N, k) for k in (1, 2, 3, 4)]
    barrier = threading.Barrier(N_THREADS)
    errors = []

    def worker(t):
        try:
            barrier.wait(timeout=JOIN_TIMEOUT)
            # Each thread visits the 4 signatures in its own order.
            order = [(t + i) % 4 for i in range(4)]
            if t % 2:
                order.reverse()
            for _ in range(3):
                for i in order:
                    out = f(inputs[i]).block_until_ready()
                    np.testing.assert_array_equal(np.asarray(out), inputs[i] * 2 + 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    _start_and_join(worker)
    assert not errors, errors
    assert body.traces == 4
    assert f._cache_size == 4


class Boom(Exception):
    pass


def test_compile_error_reaches_only_its_own_call_every_waiter_runs_its_miss():
    bad_shape = (3,)  # per-device shape of the poisoned signature
    lock = threading.Lock()
    arrived = [0]
    bad_traces = [0]

    def body(v):
        if v.shape == bad_shape:
            with lock:
                bad_traces[0] += 1
            # Hold the compile until every thread has reached the call so the
            # others wait on this entry rather than finding it finished.
            deadline = time.monotonic() + 10
            while arrived[0] < N_THREADS and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.5)
            raise Boom("poisoned signature")
        return v + 1

    f = pmapkit.pmap(body)
    bad = farange(N, 3)
    good = farange(N, 2)
    barrier = threading.Barrier(N_THREADS)
    outcomes = [None] * N_THREADS

    def worker(t):
        try:
            barrier.wait(timeout=JOIN_TIMEOUT)
            with lock:
                arrived[0] += 1
            f(bad)
            outcomes[t] = "returned"
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcomes[t] = exc

    _start_and_join(worker)
    assert all(isinstance(o, Boom) for o in outcomes), outcomes
    # Each waiter ran its own miss and raised its own error (a miss's error
    # may depend on its caller's values: it is never handed to another call).
    assert bad_traces[0] == N_THREADS
    assert len({id(o) for o in outcomes}) == N_THREADS
    # A later call with that signature runs its own miss too: it still
    # raises (retracing), and never waits on the finished entry.
    with pytest.raises(Boom):
        run_bounded(lambda: f(bad))
    assert bad_traces[0] == N_THREADS + 1
    # Other signatures are unaffected.
    out = run_bounded(lambda: f(good).block_until_ready())
    np.testing.assert_array_equal(np.asarray(out), good + 1)


# ----------------------------------------------------------- introspection --

def _documented(x, y=1):
    """Docstring that functools.wraps must carry over."""
    return x * y


def test_wraps_attributes_and_signature():
    f = pmapkit.pmap(_documented)
    assert f.__wrapped__ is _documented
    assert f.__name__ == "_documented"
    assert f.__qualname__ == "_documented"
    assert f.__module__ == __name__
    assert f.__doc__ == _documented.__doc__
    assert inspect.signature(f) == inspect.signature(_documented)
    assert callable(f._cache_miss)


def test_printed_as_classic_pmap_and_pjit_printed_theirs():
    # Both returned a functools.wraps of the user's function (2019-2022 programs print
    # it: jax-pjit-examples); the address is the wrapper's own.
    from pmapkit.pjit import pjit
    for wrapped in (pmapkit.pmap(_documented), pjit(_documented)):
        assert repr(wrapped) == f"<function _documented at {id(wrapped):#x}>"
    assert repr(pmapkit.pmap(functools.partial(_documented))).startswith(
        "<pmapkit DispatchFunction of functools.partial(<function _documented at 0x")


def test_wraps_a_custom_jvp_function():
    # Its __dict__ holds a ``fun`` attribute: not copied over our own.
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda p, t: (f(p[0]), jnp.cos(p[0]) * t[0]))
    g = pmapkit.pmap(f)
    x = jnp.arange(2.0)
    np.testing.assert_allclose(np.asarray(g(x)), np.sin(np.arange(2.0)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda v: g(v).sum())(x)),
                               np.cos(np.arange(2.0)), rtol=1e-6)
    assert g.__wrapped__ is f


def test_pmap_has_jax_pmaps_signature():
    assert inspect.signature(pmapkit.pmap) == inspect.signature(jax.pmap)


class Scaler:
    """Hashable, so an instance can be the static ``self`` of a pmapped method."""

    def __init__(self, k):
        self.k = k

    def __hash__(self):
        return hash(self.k)

    def __eq__(self, other):
        return isinstance(other, Scaler) and other.k == self.k

    @functools.partial(pmapkit.pmap, static_broadcasted_argnums=0)
    def scale(self, x):
        return x * self.k


def test_usable_as_a_method():
    raw = Scaler.__dict__["scale"]
    assert Scaler.scale is raw  # unbound access returns the object itself
    s = Scaler(3)
    bound = s.scale
    assert bound.__self__ is s and bound.__func__ is raw
    x = farange(N, 2)
    np.testing.assert_array_equal(np.asarray(s.scale(x)), x * 3)
    np.testing.assert_array_equal(np.asarray(Scaler(5).scale(x)), x * 5)
    np.testing.assert_array_equal(np.asarray(Scaler.scale(Scaler(3), x)), x * 3)
    assert raw._cache_size == 2  # one per distinct (static) self


def test_weak_referenceable():
    f = pmapkit.pmap(lambda v: v)
    ref = weakref.ref(f)
    assert ref() is f


def _pickle_body(x, y):
    return x * 2 + jax.lax.psum(y, "rows")


# Module level, so pickle can find the user function by reference.
pickled_fn = pmapkit.pmap(_pickle_body, axis_name="rows", in_axes=(0, None))


def test_pickle_round_trip_keeps_options():
    x = farange(N, 2)
    y = np.float32(1.5) * np.ones(2, np.float32)
    want = x * 2 + N * y
    restored = pickle.loads(pickle.dumps(pickled_fn))
    assert restored is not pickled_fn
    assert restored.__wrapped__ is _pickle_body
    # axis_name ("rows", used by psum) and in_axes ((0, None): y unmapped of
    # a different size) both survived.
    np.testing.assert_allclose(np.asarray(restored(x, y)), want)
    np.testing.assert_allclose(np.asarray(pickled_fn(x, y)), want)


def test_pickle_state_is_versioned():
    fn, (state,) = pickled_fn.__reduce__()
    assert fn is pmap_module._unpickle_pmap
    assert "version" in state
    tampered = dict(state, version=state["version"] + 1)
    with pytest.raises(ValueError, match="pickle version"):
        pmap_module._unpickle_pmap(tampered)
    assert fn(dict(state)).__wrapped__ is _pickle_body


def test_lower_as_text():
    f = pmapkit.pmap(lambda v: v * 2, axis_name="i")
    text = f.lower(farange(N, 2)).as_text()
    assert "stablehlo" in text or "func" in text
    assert f._cache_size == 0  # lowering does not run or cache


def test_lower_compile_runs_on_a_sharded_input():
    f = pmapkit.pmap(lambda v: v * 2, axis_name="i")
    x = farange(N, 2)
    y = f(x)  # already sharded the way f's program wants
    compiled = f.lower(y).compile()
    assert callable(compiled)
    out = compiled(y)
    assert isinstance(out, jax.Array)
    np.testing.assert_array_equal(np.asarray(out), x * 4)


def test_lower_compile_keeps_the_user_pytrees():
    # Like classic pmap: the compiled object takes and returns the user's
    # pytrees, not the flat program's operands and result tuple.
    f = pmapkit.pmap(lambda d: {"out": d["a"] + d["b"]})
    x = farange(N, 2)
    compiled = f.lower({"a": x, "b": x}).compile()
    out = compiled({"a": x, "b": x})
    assert isinstance(out, dict)
    np.testing.assert_array_equal(np.asarray(out["out"]), x * 2)


# ---------------------------------------------------------------- donation --

def test_donated_device_input_is_deleted():
    f = pmapkit.pmap(lambda v: v * 2 + 1, donate_argnums=0)
    x0 = farange(N, 3)
    x1 = f(x0)
    x2 = f(x1)  # fast path: x1 already has f's input sharding
    assert x1.is_deleted()
    with pytest.raises(RuntimeError):
        np.asarray(x1)
    np.testing.assert_array_equal(np.asarray(x2), (x0 * 2 + 1) * 2 + 1)


def test_donating_a_host_array_is_fine():
    f = pmapkit.pmap(lambda v: v + 1, donate_argnums=0)
    x = farange(N, 2)
    for _ in range(2):  # miss, then hit
        np.testing.assert_array_equal(np.asarray(f(x)), x + 1)
    np.testing.assert_array_equal(x, farange(N, 2))  # the host copy is intact


_DELETED_INPUT_SCRIPT = textwrap.dedent("""
    import numpy as np
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    import pmapkit
    f = pmapkit.pmap(lambda v: v * 2, donate_argnums=0)
    h = pmapkit.pmap(lambda v: v - 1)   # donates nothing
    y = f(np.ones(8, np.float32))
    h(y)
    h(y)                       # h's entry for y's signature is hot
    f(y)                       # donates y
    assert y.is_deleted()
    z = h(f(np.ones(8, np.float32)))
    z.delete()
    # Hit paths (donating, then not, with a donated and a deleted input),
    # then a miss.
    for g, v in ((f, y), (h, y), (h, z), (pmapkit.pmap(lambda v: v + 1), y)):
        try:
            g(v).block_until_ready()
        except RuntimeError as e:
            print("RAISED", type(e).__name__, e)
        else:
            print("NO ERROR")
    # The refused calls left h's entry as it was: a live input runs on it.
    print("LIVE", float(h(h(np.ones(8, np.float32)))[0]),
          h._debug_dispatch_stats()["misses"])
""")


def test_using_a_donated_input_again_raises():
    # In a subprocess: handing a deleted buffer to execute_sharded segfaults
    # the interpreter (jaxlib does not check), which would kill this run.
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _DELETED_INPUT_SCRIPT],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    raised = [line for line in proc.stdout.splitlines() if line.startswith("RAISED")]
    assert len(raised) == 4, proc.stdout
    # JAX's own words for a deleted array, whichever path refused it.
    assert all(line.startswith("RAISED RuntimeError Array has been deleted with "
                               "shape=float32[8]") for line in raised), proc.stdout
    assert "LIVE -1.0 1" in proc.stdout, proc.stdout  # one compile, all hits since


# ----------------------------------------------------------------- outputs --

def test_output_is_a_sharded_jax_array():
    f = pmapkit.pmap(lambda v: v + 1)
    out = f(farange(N, 2))
    assert isinstance(out, jax.Array)
    assert type(out) is type(jnp.zeros(1))
    assert set(out.sharding.device_set) == set(jax.devices())
    assert len(out.addressable_shards) == N


def test_output_feeds_another_pmapped_function(spy):
    f = pmapkit.pmap(lambda v: v + 1, axis_name="i")
    g = pmapkit.pmap(lambda v: v * jax.lax.psum(1, "j"), axis_name="j")
    x = farange(N, 2)
    y = f(x)
    for _ in range(3):
        out = g(y)
        np.testing.assert_array_equal(np.asarray(out), (x + 1) * N)
    assert g._cache_size == 1
    assert spy.prepare == 2  # one miss each for f and g; none on g's re-calls
    assert not y.is_deleted()


# ------------------------------------------------- config flips between calls --

def _flip_cases():
    """(name, context factory, function) per config: the function's result
    depends on the setting, the way a cached jax.jit call's does."""
    return [
        ("jax_enable_x64", lambda: jax.enable_x64(True),
         lambda v: (v, jnp.zeros(2), jnp.arange(2))),
        ("jax_default_matmul_precision", lambda: jax.default_matmul_precision("highest"),
         lambda v: (v @ v.T, v)),
        ("jax_numpy_rank_promotion", lambda: jax.numpy_rank_promotion("allow"),
         lambda v: v + jnp.ones((v.shape[-1],), v.dtype)),
    ]


def _run_flips(call, make_jit):
    """Call ``call`` (pmapkit) and the matching jax.jit with each config
    flipped between cached calls; both see the same results or errors."""
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    for name, flipped, fn in _flip_cases():
        ours, theirs = call(fn), make_jit(fn)

        def both():
            results = []
            for g, arg in ((ours, x), (theirs, x[0])):
                try:
                    out = g(arg)
                except Exception as exc:  # noqa: BLE001 - compared below
                    results.append(type(exc))
                    continue
                leaves = jax.tree_util.tree_leaves(out)
                if g is ours:
                    leaves = [leaf[0] for leaf in leaves]  # the one device's slice
                results.append([(np.asarray(leaf).dtype, np.asarray(leaf).tolist())
                                for leaf in leaves])
            assert results[0] == results[1], (name, results)
            return results[0]

        before = [both(), both()]             # miss, then cached
        with flipped():
            during = [both(), both()]         # the flip, then cached under it
        after = both()                        # back: the first entry again
        assert before[0] == before[1] == after, name
        assert during[0] == during[1], name
        if name != "jax_default_matmul_precision":  # numerically equal on CPU
            assert during[0] != before[0], (name, before[0], during[0])


def test_config_flips_between_cached_pmap_calls_follow_like_jit():
    _run_flips(lambda fn: pmapkit.pmap(fn, devices=jax.devices()[:1]),
               lambda fn: jax.jit(fn))


def test_config_flips_between_cached_pjit_calls_follow_like_jit():
    mesh = pmapkit.Mesh(np.array(jax.devices()[:1]), ("x",))

    def pjit_call(fn):
        f = pmapkit.pjit(fn)
        # The pmap-shaped view _run_flips reads: a leading axis of one.
        return lambda v: jax.tree_util.tree_map(lambda o: o[None], f(v[0]))

    with mesh:
        _run_flips(pjit_call, lambda fn: jax.jit(fn))


def test_named_axis_context_takes_the_python_path():
    # The hit path reads the axis env out of JAX's trace context: at top
    # level it is the top env; inside a named axis a call runs as traced.
    from pmapkit import _jax_private as jp
    probe = jp.top_level_probe()
    index = probe[4]
    assert index >= 0
    assert jp.trace_context()[index] is probe[2].value is probe[3]
    f = pmapkit.pmap(lambda v: v + 1)
    x = farange(N)
    y = f(x)
    f(y)
    misses = f._debug_dispatch_stats()["misses"]
    with jp.extend_axis_env_nd([("outer_axis", 2)]):
        assert jp.trace_context()[index] is probe[2].value
        assert probe[2].value is not probe[3]
        out = f(y)
    assert f._debug_dispatch_stats()["misses"] == misses + 1
    np.testing.assert_array_equal(np.asarray(out), x + 2)
    f(y)
    assert f._debug_dispatch_stats()["misses"] == misses + 1  # hit again


def test_one_leaf_and_tree_outputs_on_the_hit_path():
    # A bare-leaf output is returned as it is; any other tree is rebuilt.
    fs = {"leaf": pmapkit.pmap(lambda v: v + 1),
          "tuple1": pmapkit.pmap(lambda v: (v + 1,)),
          "list1": pmapkit.pmap(lambda v: [v + 1]),
          "dict": pmapkit.pmap(lambda v: {"a": v + 1, "b": v}),
          "none_and_leaf": pmapkit.pmap(lambda v: (None, v + 1))}
    x = farange(N)
    for name, f in fs.items():
        outs = [f(x) for _ in range(3)]   # a miss, then hits
        first, hit = outs[0], outs[2]
        assert jax.tree_util.tree_structure(hit) == jax.tree_util.tree_structure(first), name
        leaves = jax.tree_util.tree_leaves(hit)
        assert all(isinstance(o, jax.Array) for o in leaves), name
        np.testing.assert_array_equal(np.asarray(leaves[0]), x + 1)
        assert f._debug_dispatch_stats()["misses"] == 1, name


def test_matmul_precision_flip_keys_another_entry():
    # Not visible in CPU values: the program is another one (as jax.jit's).
    f = pmapkit.pmap(lambda v: v @ v.T, devices=jax.devices()[:1])
    x = np.ones((1, 2, 2), np.float32)
    f(x)
    f(x)
    with jax.default_matmul_precision("highest"):
        f(x)
        text = f.lower(x).as_text()
        f(x)
    f(x)
    assert f._cache_size == 2 and f._debug_dispatch_stats()["misses"] == 2
    assert "HIGHEST" in text


def test_mesh_context_flip_between_cached_pjit_calls():
    from jax.sharding import PartitionSpec as P
    f = pmapkit.pjit(lambda v: v * 2, in_axis_resources=P("x"), out_axis_resources=P("x"))
    x = np.arange(8, dtype=np.float32)
    seen = []
    for devices in (jax.devices()[:2], jax.devices()[:4], jax.devices()[:2]):
        with pmapkit.Mesh(np.array(devices), ("x",)):
            for _ in range(2):  # a miss (first time per mesh), then cached
                out = f(x)
                np.testing.assert_array_equal(np.asarray(out), x * 2)
                assert out.sharding.device_set == set(devices)
                theirs = jax.jit(lambda v: v * 2, out_shardings=jax.sharding.NamedSharding(
                    jax.sharding.Mesh(np.array(devices), ("x",)), P("x")))(x)
                assert out.sharding.is_equivalent_to(theirs.sharding, 1)
        seen.append(f._cache_size)
    assert seen == [1, 2, 2]


def test_every_call_form_reaches_the_same_entry_by_vectorcall():
    # The compiled DispatchFunction is called by vectorcall (its C entry
    # builds the arguments; no keywords share one empty dict): positional,
    # keyword, unpacked and bound-method calls give the same values, and a
    # keyword call never leaves keywords behind for the next call.
    from pmapkit.core.hitpath import _compiled
    f = pmapkit.pmap(lambda x, y: x * 10 + y)
    n = jax.local_device_count()
    x = np.ones((n, 2), np.float32)
    y = np.full((n, 2), 2.0, np.float32)
    want = x * 10 + y
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x, y)), want)
        np.testing.assert_array_equal(np.asarray(f(x, y=y)), want)
        np.testing.assert_array_equal(np.asarray(f(y=y, x=x)), want)
        np.testing.assert_array_equal(np.asarray(f(*(x, y))), want)
        np.testing.assert_array_equal(np.asarray(f(**{"x": x, "y": y})), want)
        with pytest.raises(TypeError):
            f(x)  # the keyword of the call before is not carried over

    class Holder:
        g = pmapkit.pmap(lambda self, v: v + 1, static_broadcasted_argnums=0)

        def __hash__(self):
            return 0

        def __eq__(self, other):
            return isinstance(other, Holder)
    np.testing.assert_array_equal(np.asarray(Holder().g(x)), x + 1)
    vectorcall = bool(type(f).__flags__ & (1 << 11))  # Py_TPFLAGS_HAVE_VECTORCALL
    assert vectorcall == _compiled.COMPILED

