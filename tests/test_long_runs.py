"""What makes a long run die: caches that never evict, and collective
programs queued without bound on XLA:CPU.

Both are checked in fresh processes (bounded by timeouts): resident memory
is the process's own, and an XLA:CPU rendezvous timeout aborts the process.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax

import pmapkit
from pmapkit.core.keys import caches
from pmapkit.core.programs import compiling, inflight

N = len(jax.devices())


def run_script(code, timeout, env=None):
    proc = subprocess.run(
        [sys.executable, "-P", "-c", textwrap.dedent(code)],
        env=dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
                 **(env or {})),
        capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


# ------------------------------------------------------------------- caches --

def test_per_function_cache_is_lru_bounded():
    f = pmapkit.pmap(lambda x: x + 1)
    f._set_cache_size(3)
    for k in range(1, 6):
        f(np.ones((N, k), np.float32))
    assert f._cache_size == 3
    stats = f._debug_dispatch_stats()
    assert stats["evictions"] == 2 and stats["cache_size_limit"] == 3
    # The most recently used survive: calling them again is no miss.
    misses = stats["misses"]
    for k in (3, 4, 5):
        f(np.ones((N, k), np.float32))
    assert f._debug_dispatch_stats()["misses"] == misses
    f(np.ones((N, 1), np.float32))  # evicted: compiles again
    assert f._debug_dispatch_stats()["misses"] == misses + 1


def test_lru_keeps_entries_in_use():
    f = pmapkit.pmap(lambda x: x * 2)
    f._set_cache_size(2)
    hot = np.ones((N, 1), np.float32)
    for k in range(2, 8):
        f(hot)  # used between every new signature
        f(np.ones((N, k), np.float32))
    misses = f._debug_dispatch_stats()["misses"]
    f(hot)
    assert f._debug_dispatch_stats()["misses"] == misses


def test_set_cache_size_reaches_live_functions_and_validates():
    before = caches.cache_sizes()
    f = pmapkit.pmap(lambda x: x - 1)
    for k in range(1, 5):
        f(np.ones((N, k), np.float32))
    try:
        pmapkit.set_cache_size(per_function=2, programs=64)
        assert f._cache_size == 2
        assert pmapkit.pmap(lambda x: x)._debug_dispatch_stats()["cache_size_limit"] == 2
        assert len(compiling._compile_cache) <= 64
    finally:
        pmapkit.set_cache_size(**before)
    for bad in (0, -1, 1.5, "8"):
        with pytest.raises(ValueError, match="per_function must be a positive int"):
            pmapkit.set_cache_size(per_function=bad)
    with pytest.raises(ValueError, match="programs must be a positive int"):
        pmapkit.set_cache_size(programs=0)


def test_jax_clear_caches_empties_pmapkits():
    f = pmapkit.pmap(lambda x: x + 3)
    g = pmapkit.pjit(lambda x: x * 3)
    x = np.ones((N, 2), np.float32)
    f(x)
    with pmapkit.Mesh(np.array(jax.devices()), ("i",)):
        g(x)
    assert f._cache_size == 1 and g._cache_size == 1 and compiling._compile_cache
    jax.clear_caches()
    assert f._cache_size == 0 and g._cache_size == 0
    assert not compiling._compile_cache and not compiling._outer_jits
    np.testing.assert_array_equal(np.asarray(f(x)), x + 3)  # compiles again
    pmapkit.clear_caches()
    assert f._cache_size == 0


def test_resident_memory_flat_under_shape_churn():
    # 320 distinct shapes under small bounds: the caches stay at their bound
    # and the resident set stops growing (unbounded, each compiled program
    # stays: ~1.5 MiB per shape here).
    out = run_script("""
        import gc, os
        import numpy as np
        import jax, pmapkit

        def rss_mib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

        pmapkit.set_cache_size(per_function=8, programs=8)
        f = pmapkit.pmap(lambda x: x * 2 + 1)
        marks = {}
        for k in range(1, 321):
            f(np.ones((8, k), np.float32)).block_until_ready()
            if k in (120, 320):
                gc.collect()
                marks[k] = rss_mib()
        from pmapkit.core.programs import compiling
        print(f._cache_size, len(compiling._compile_cache), marks[120], marks[320])
    """, timeout=300)
    size, programs, at_120, at_320 = out.split()
    assert int(size) == 8 and int(programs) <= 8
    growth = float(at_320) - float(at_120)
    assert growth < 40, f"resident set grew {growth:.1f} MiB over 200 new shapes"


# ------------------------------------------------- collectives on XLA:CPU --

def test_ten_thousand_unblocked_psums_complete():
    # Unbounded, ~100 queued collective programs abort XLA:CPU here
    # ("Termination timeout for all reduce"); the in-flight ring keeps the
    # queue short. Hit path and Python path both.
    out = run_script("""
        import numpy as np
        import jax, pmapkit
        f = pmapkit.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
        x = np.ones((8, 4), np.float32)
        y = f(x)
        for _ in range(10_000):
            y = f(x)
        g = pmapkit.pmap(lambda x: jax.lax.psum(x, "i") * 2, axis_name="i")
        for _ in range(300):
            z = g(x * 1.0)   # numpy input: still the hit path (host put)
        print(float(y[0, 0]), float(z[3, 1]), pmapkit.core.programs.inflight.cpu_collectives_in_flight())
    """, timeout=400)
    total, doubled, limit = out.split()
    assert float(total) == 8.0 and float(doubled) == 16.0
    assert int(limit) == inflight.DEFAULT_LIMIT


def test_programs_without_collectives_are_not_bounded():
    f = pmapkit.pmap(lambda x: x + 1)
    fp = f._cache_miss(np.ones((N, 2), np.float32))[1]
    assert not fp.program.cpu_collectives
    assert not isinstance(fp.executable, inflight.BoundedExecutable)
    g = pmapkit.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
    gp = g._cache_miss(np.ones((N, 2), np.float32))[1]
    assert gp.program.cpu_collectives
    assert isinstance(gp.executable, inflight.BoundedExecutable)
    # A pjit whose partitioned program all-reduces (a contraction over a
    # sharded dimension) is bounded too.
    mesh = pmapkit.Mesh(np.array(jax.devices()[:4]), ("x",))
    h = pmapkit.pjit(lambda a: a.sum(), pmapkit.PartitionSpec("x"), None)
    with mesh:
        hp = h._cache_miss(np.ones(8, np.float32))[1]
    assert hp.program.cpu_collectives


def test_in_flight_bound_is_configurable():
    before = inflight.cpu_collectives_in_flight()
    try:
        inflight.set_cpu_collectives_in_flight(1)
        g = pmapkit.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
        x = np.ones((N, 2), np.float32)
        for _ in range(20):
            y = g(x)
        np.testing.assert_array_equal(np.asarray(y), np.full((N, 2), N))
        inflight.set_cpu_collectives_in_flight(0)
        assert inflight.cpu_collectives_in_flight() == 0
    finally:
        inflight.set_cpu_collectives_in_flight(before)
    for bad in (-1, 2.0, None):
        with pytest.raises(ValueError, match="limit must be a non-negative int"):
            inflight.set_cpu_collectives_in_flight(bad)
    run_script("""
        from pmapkit.core.programs import inflight
        assert inflight.cpu_collectives_in_flight() == 2
    """, timeout=120, env={"PMAPKIT_CPU_COLLECTIVES_IN_FLIGHT": "2"})


# ----------------------------------------------------- donation across threads --

def test_two_threads_donating_one_array_never_crash():
    # PjRt crashes on a buffer donated twice (jax.pmap and jax.jit do, here);
    # pmapkit checks and donates under one lock: one call runs, the other
    # raises JAX's "Array has been deleted".
    out = run_script("""
        import threading
        import numpy as np
        import jax, jax.numpy as jnp, pmapkit
        from pmapkit import PartitionSpec as P

        mesh = pmapkit.Mesh(np.array(jax.devices()), ("x",))
        pm = pmapkit.pmap(lambda v: v + 1, donate_argnums=0)
        pj = pmapkit.pjit(lambda v: v + 1, P("x"), P("x"), donate_argnums=0)
        outcomes = {}
        for name, f in (("pmap", pm), ("pjit", pj)):
            for _ in range(60):
                x = jax.device_put(jnp.zeros((8, 16)), jax.sharding.NamedSharding(mesh, P("x")))
                gate, seen = threading.Barrier(2), []

                def call():
                    gate.wait()
                    try:
                        with mesh:
                            seen.append(float(np.asarray(f(x))[0, 0]))
                    except RuntimeError as e:
                        assert "Array has been deleted" in str(e), e
                        seen.append("deleted")

                threads = [threading.Thread(target=call, daemon=True) for _ in range(2)]
                [t.start() for t in threads]
                [t.join(60) for t in threads]
                assert not any(t.is_alive() for t in threads), "a donating call hung"
                outcomes[(name, tuple(sorted(map(str, seen))))] = \\
                    outcomes.get((name, tuple(sorted(map(str, seen)))), 0) + 1
        print(sorted(outcomes.items()))
    """, timeout=300)
    assert "('pmap', ('1.0', 'deleted')), 60)" in out, out
    assert "('pjit', ('1.0', 'deleted')), 60)" in out, out
