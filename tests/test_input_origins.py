"""One fast path for every input and every call form.

- pmap: an array whose per-device layout is what the program takes — same
  devices in the same order, every dimension split alike — takes the
  compiled hit path whatever made it (pmapkit pmaps with any axis name,
  jax.pmap, ``jax.device_put`` on any mesh as flax's helpers do, jit outputs,
  ``SingleDeviceSharding`` for a one-device pmap, the classic placement
  helpers): no miss, nothing resharded, the very buffers passed on (donating
  the input consumes it), values and shardings equal to jax.pmap's. A really
  different layout is resharded silently.
- pjit: explicit and omitted specs, keyword arguments, ``static_argnames``,
  donation, ``jax.set_mesh`` and AOT ``lower().compile()`` calls compile
  once and then stay on the hit path.
- ``device_put_replicated`` / ``device_put_sharded``: classic semantics and
  errors.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit.core.programs import compiled_program, compiling

N = len(jax.devices())  # 8, forced by conftest
FLAX_AXIS = "_device_put_sharded"


def host(n, cols=3):
    return np.arange(n * cols, dtype=np.float32).reshape(n, cols)


def make_input(origin, devices):
    n = len(devices)
    ident = lambda a: a  # noqa: E731
    if origin == "pmapkit_same_axis":
        return pmapkit.pmap(ident, axis_name="i", devices=devices)(host(n))
    if origin == "pmapkit_other_axis":
        return pmapkit.pmap(ident, axis_name="other", devices=devices)(host(n))
    if origin == "pmapkit_unnamed":
        return pmapkit.pmap(ident, devices=devices)(host(n))
    if origin == "jax_pmap":
        return jax.pmap(ident, axis_name="j", devices=devices)(host(n))
    if origin == "device_put_named":
        mesh = Mesh(np.array(devices), (FLAX_AXIS,))
        return jax.device_put(host(n), NamedSharding(mesh, P(FLAX_AXIS)))
    if origin == "device_put_fresh_sharding":
        # A producer that builds an equal sharding object anew per batch.
        mesh = Mesh(np.array(devices), ("batch",))
        return jax.device_put(host(n), NamedSharding(mesh, P("batch")))
    if origin == "jit_output":
        s = NamedSharding(Mesh(np.array(devices), ("x",)), P("x"))
        return jax.jit(lambda a: a * 1, out_shardings=s)(host(n))
    if origin == "single_device":
        return jax.device_put(host(n), devices[0])
    if origin == "device_put_replicated":
        return pmapkit.device_put_replicated(host(1)[0], devices)
    if origin == "device_put_sharded":
        return pmapkit.device_put_sharded(list(host(n)), devices)
    raise ValueError(origin)


ORIGINS = ["pmapkit_same_axis", "pmapkit_other_axis", "pmapkit_unnamed", "jax_pmap",
           "device_put_named", "device_put_fresh_sharding", "jit_output",
           "device_put_replicated", "device_put_sharded"]
CASES = ([(o, N) for o in ORIGINS] + [(o, 1) for o in ORIGINS]
         + [("single_device", 1)])


def stats(f):
    return f._debug_dispatch_stats()


def assert_like_jax_pmap(ours, theirs):
    assert ours.sharding == theirs.sharding
    assert [s.device for s in ours.addressable_shards] == \
        [s.device for s in theirs.addressable_shards]
    for a, b in zip(ours.addressable_shards, theirs.addressable_shards):
        np.testing.assert_array_equal(np.asarray(a.data), np.asarray(b.data))


@pytest.mark.parametrize("origin,n", CASES, ids=[f"{o}-{n}" for o, n in CASES])
def test_equivalent_input_takes_the_hit_path(origin, n):
    devices = jax.devices()[:n]
    f = pmapkit.pmap(lambda a: a * 2 + 1, axis_name="i", devices=devices)
    f(host(n))  # compile on a host value
    before = stats(f)
    x = make_input(origin, devices)
    for _ in range(3):
        out = f(make_input(origin, devices) if origin.endswith("fresh_sharding") else x)
    after = stats(f)
    assert after["misses"] == before["misses"], (before, after)
    assert after["resharded"] == before["resharded"] == 0
    assert f._cache_size == 1
    assert_like_jax_pmap(out, jax.pmap(lambda a: a * 2 + 1, axis_name="i",
                                       devices=devices)(x))


@pytest.mark.parametrize("origin", ["jax_pmap", "device_put_named", "pmapkit_other_axis",
                                    "jit_output", "device_put_sharded"])
def test_equivalent_input_buffers_are_passed_on(origin):
    # Donating the input consumes it only when its very buffers reach the
    # program (a copy would be donated instead, leaving the input alive).
    devices = jax.devices()
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i", devices=devices, donate_argnums=0)
    f(make_input(origin, devices))
    x = make_input(origin, devices)
    out = f(x)
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(out), host(N) + 1)
    assert stats(f)["resharded"] == 0


def test_a_really_different_layout_is_resharded_silently():
    devices = jax.devices()
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i", devices=devices, donate_argnums=0)
    f(host(N))
    reversed_mesh = Mesh(np.array(devices[::-1]), ("r",))
    x = jax.device_put(host(N), NamedSharding(reversed_mesh, P("r")))
    out = f(x)
    np.testing.assert_array_equal(np.asarray(out), host(N) + 1)
    assert not x.is_deleted()  # a copy was made, and donated
    assert stats(f)["resharded"] == 1 and f._cache_size == 1
    # Columns split instead of rows: another layout, resharded too.
    cols = jax.device_put(host(N, 8), NamedSharding(Mesh(np.array(devices), ("c",)),
                                                   P(None, "c")))
    g = pmapkit.pmap(lambda a: a - 1, axis_name="i", devices=devices)
    g(cols)  # the miss
    np.testing.assert_array_equal(np.asarray(g(cols)), host(N, 8) - 1)
    assert stats(g)["resharded"] == 1


def test_equivalence_is_remembered_per_sharding_object():
    devices = jax.devices()
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i", devices=devices)
    x = make_input("device_put_named", devices)
    y = make_input("jax_pmap", devices)
    for _ in range(4):
        f(x)
        f(y)
    assert stats(f)["equivalent_shardings"] == 2
    assert stats(f)["misses"] == 1


def test_typed_key_inputs_of_another_mesh_take_the_hit_path():
    devices = jax.devices()
    keys = jax.random.split(jax.random.key(0), N)
    placed = jax.device_put(keys, NamedSharding(Mesh(np.array(devices), (FLAX_AXIS,)),
                                                P(FLAX_AXIS)))
    f = pmapkit.pmap(lambda k: jax.random.uniform(k, ()), axis_name="i")
    first = f(placed)
    before = stats(f)
    again = f(placed)
    assert stats(f)["misses"] == before["misses"]
    assert stats(f)["resharded"] == 0
    np.testing.assert_array_equal(np.asarray(first), np.asarray(again))
    np.testing.assert_array_equal(np.asarray(again),
                                  np.asarray(jax.pmap(lambda k: jax.random.uniform(k, ()))(keys)))


# ------------------------------------------------------------ pjit call forms --

def mesh4():
    return pmapkit.Mesh(np.array(jax.devices()[:4]), ("x",))


def compiles():
    return len(compiling._compile_cache)


def test_pjit_omitted_specs_sign_the_committed_sharding():
    mesh = mesh4()
    f = pmapkit.pjit(lambda a: a * 2)
    rows = jax.device_put(host(8), NamedSharding(mesh, P("x")))
    repl = jax.device_put(host(8), NamedSharding(mesh, P()))
    with mesh:
        a = f(rows)
        b = f(repl)
        assert f._cache_size == 2  # two placements, two programs
        misses = stats(f)["misses"]
        for _ in range(3):
            a, b = f(a), f(b)
    assert stats(f)["misses"] == misses
    assert a.sharding == NamedSharding(mesh, P("x"))
    assert b.sharding.is_fully_replicated
    np.testing.assert_array_equal(np.asarray(a), host(8) * 16)
    np.testing.assert_array_equal(np.asarray(b), host(8) * 16)


@pytest.mark.parametrize("form", ["explicit", "omitted", "kwargs", "static_argnames",
                                  "static_argnums_by_keyword", "donate", "set_mesh"])
def test_pjit_call_forms_compile_once_and_hit(form):
    mesh = mesh4()
    s = NamedSharding(mesh, P("x"))
    a = jax.device_put(host(8), s)
    b = jax.device_put(np.ones((8, 3), np.float32), s)
    context = mesh
    if form == "explicit":
        f, call = pmapkit.pjit(lambda u: u + 1, P("x"), P("x")), lambda x: f(x)
        ref = jax.jit(lambda u: u + 1, in_shardings=s, out_shardings=s)
    elif form == "omitted":
        f, call = pmapkit.pjit(lambda u: u + 1), lambda x: f(x)
        ref = jax.jit(lambda u: u + 1)
    elif form == "kwargs":
        f, call = pmapkit.pjit(lambda u, v: u + v), lambda x: f(x, v=b)
        ref = lambda u: jax.jit(lambda u, v: u + v)(u, v=b)  # noqa: E731
    elif form == "static_argnames":
        f = pmapkit.pjit(lambda u, k: u * k, static_argnames="k")
        call = lambda x: f(x, k=3)  # noqa: E731
        ref = lambda u: jax.jit(lambda u, k: u * k, static_argnames="k")(u, k=3)  # noqa: E731
    elif form == "static_argnums_by_keyword":
        f = pmapkit.pjit(lambda u, k: u * k, static_argnums=1)
        call = lambda x: f(x, k=3)  # noqa: E731
        ref = lambda u: u * 3  # noqa: E731
    elif form == "donate":
        f = pmapkit.pjit(lambda u: u + 1, P("x"), P("x"), donate_argnums=0)
        call = lambda x: f(x)  # noqa: E731
        ref = lambda u: u + 1  # noqa: E731
    else:  # set_mesh
        f, call = pmapkit.pjit(lambda u: u + 1, P("x"), P("x")), lambda x: f(x)
        ref = jax.jit(lambda u: u + 1, in_shardings=s, out_shardings=s)
        context = jax.set_mesh(mesh)
    want = np.asarray(ref(ref(ref(a))))
    start = compiles()
    with context:
        x = call(a)
        misses = stats(f)["misses"]
        x = call(call(x))
    assert compiles() - start <= 1
    assert stats(f)["misses"] == misses and stats(f)["resharded"] == 0
    assert f._cache_size == 1
    np.testing.assert_array_equal(np.asarray(x), want)
    assert x.sharding.is_equivalent_to(s, 2)


def test_pjit_static_keyword_values_key_the_cache():
    f = pmapkit.pjit(lambda u, k: u * k, static_argnames="k")
    with mesh4():
        assert float(f(jnp.float32(2), k=3)) == 6
        assert float(f(jnp.float32(2), k=4)) == 8
        assert float(f(jnp.float32(2), k=3)) == 6
    assert f._cache_size == 2
    keys = f._debug_cache_keys()
    assert "static args (keyword): k=3 (int)" in keys
    assert "static args (keyword): k=4 (int)" in keys


def test_pjit_cache_selects_the_set_mesh_mesh():
    f = pmapkit.pjit(lambda u: u + 1, P("x"), P("x"))
    m4, m2 = mesh4(), pmapkit.Mesh(np.array(jax.devices()[4:6]), ("x",))
    with jax.set_mesh(m4):
        a = f(host(8))
    with jax.set_mesh(m2):
        b = f(host(8))
    assert a.sharding.mesh == m4 and b.sharding.mesh == m2
    assert f._cache_size == 2


def test_pjit_device_mode_is_on_the_hit_path():
    dev = jax.devices()[3]
    f = pmapkit.pjit(lambda u: u * 2, device=dev)
    x = f(host(2))
    misses = stats(f)["misses"]
    x = f(f(x))
    assert stats(f)["misses"] == misses
    assert x.sharding == jax.sharding.SingleDeviceSharding(dev)
    np.testing.assert_array_equal(np.asarray(x), host(2) * 8)


# ------------------------------------------------------------------ AOT calls --

@pytest.mark.parametrize("api", ["pmap", "pjit"])
def test_aot_compiled_calls_run_on_the_core(api):
    if api == "pmap":
        f = pmapkit.pmap(lambda a: a + 1, axis_name="i")
        x = make_input("jax_pmap", jax.devices())
        context = mesh4()  # irrelevant to a pmap
    else:
        f = pmapkit.pjit(lambda a: a + 1, P("x"), P("x"))
        context = mesh4()
        x = jax.device_put(host(8), NamedSharding(context, P("x")))
    with context:
        compiled = f.lower(x).compile()
    assert isinstance(compiled, jax.stages.Compiled)
    y = compiled(x)
    core = compiled._call
    assert type(core).__name__ == "DispatchFunction"
    misses = core._debug_dispatch_stats()["misses"]
    for _ in range(3):
        y = compiled(y)
    assert core._debug_dispatch_stats()["misses"] == misses
    assert core._debug_dispatch_stats()["resharded"] == 0
    np.testing.assert_array_equal(np.asarray(y), host(8) + 4)
    # JAX's own checks still run on a miss.
    with pytest.raises(TypeError, match="Argument types differ"):
        compiled(np.zeros((8, 2), np.float32))
    with pytest.raises(TypeError, match="input pytree does not match"):
        compiled((x,))


# ------------------------------------------------------- the placement helpers --

def test_device_put_replicated_is_classic_and_hits_unnamed_pmaps_directly():
    devices = jax.devices()
    x = pmapkit.device_put_replicated(np.arange(3, dtype=np.float32), devices)
    assert x.shape == (N, 3)
    assert [s.device for s in x.addressable_shards] == devices
    for s in x.addressable_shards:
        np.testing.assert_array_equal(np.asarray(s.data), [[0, 1, 2]])
    f = pmapkit.pmap(lambda a: a * 2)
    out = f(x)
    assert out.sharding == x.sharding  # the unnamed pmap's own sharding
    assert stats(f)["equivalent_shardings"] == 0 and stats(f)["resharded"] == 0
    tree = pmapkit.device_put_replicated({"w": 1.5, "b": jnp.ones(2, jnp.int32)}, devices[:2])
    assert tree["w"].shape == (2,) and tree["w"].weak_type
    assert tree["b"].dtype == jnp.int32 and tree["b"].shape == (2, 2)
    keys = pmapkit.device_put_replicated(jax.random.key(1), devices[:2])
    assert keys.shape == (2,) and jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)


def test_device_put_sharded_is_classic():
    devices = jax.devices()[:4]
    shards = [{"a": np.full(2, k, np.float32), "b": k} for k in range(4)]
    out = pmapkit.device_put_sharded(shards, devices)
    np.testing.assert_array_equal(np.asarray(out["a"]), np.repeat(np.arange(4.0), 2).reshape(4, 2))
    np.testing.assert_array_equal(np.asarray(out["b"]), np.arange(4))
    for k, s in enumerate(out["a"].addressable_shards):
        assert s.device == devices[k]
        np.testing.assert_array_equal(np.asarray(s.data), [[k, k]])


def test_placement_helpers_classic_errors():
    devices = jax.devices()[:2]
    with pytest.raises(ValueError, match=r"len\(shards\) = 3 must equal len\(devices\) = 2\."):
        pmapkit.device_put_sharded([np.ones(2)] * 3, devices)
    with pytest.raises(ValueError, match="the shards passed to device_put_sharded must have "
                                         r"consistent shape and dtype, but got float32\[2\] "
                                         r"and float32\[3\]\."):
        pmapkit.device_put_sharded([np.ones(2, np.float32), np.ones(3, np.float32)], devices)
    with pytest.raises(ValueError, match="consistent shape and dtype, but got float32"):
        pmapkit.device_put_sharded([np.ones(2, np.float32), np.ones(2, np.int32)], devices)
    with pytest.raises(TypeError, match="device_put_sharded `shards` input must be a "
                                        "sequence; got <class 'numpy.ndarray'>"):
        pmapkit.device_put_sharded(np.ones((2, 2)), devices)
    with pytest.raises(ValueError, match="`devices` argument to `device_put_replicated "
                                         "must be a non-empty sequence"):
        pmapkit.device_put_replicated(np.ones(2), [])
    with pytest.raises(TypeError, match="`devices` must be a sequence of jax.Device "
                                        "objects .* got an element 0 of type int"):
        pmapkit.device_put_replicated(np.ones(2), [0, 1])


def count_layout_questions(monkeypatch):
    """A list that records each input index JAX's layout question
    (``CompiledProgram.is_equivalent``) is asked for."""
    asked = []
    real = compiled_program.CompiledProgram.is_equivalent

    def counting(self, x, i):
        asked.append(i)
        return real(self, x, i)

    monkeypatch.setattr(compiled_program.CompiledProgram, "is_equivalent", counting)
    return asked


def test_a_different_layout_is_decided_once_too(monkeypatch):
    # The layout question is asked once per sharding object, both ways: an
    # input laid out otherwise is resharded on later calls without asking.
    asked = count_layout_questions(monkeypatch)
    devices = jax.devices()
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i", devices=devices)
    f(host(N))
    x = jax.device_put(host(N), NamedSharding(Mesh(np.array(devices[::-1]), ("r",)), P("r")))
    for _ in range(4):
        np.testing.assert_array_equal(np.asarray(f(x)), host(N) + 1)
    assert len(asked) == 1
    assert stats(f)["resharded"] == 4 and stats(f)["misses"] == 1


# -- inputs that must move: one plan per source sharding, one move per call ----------
def moved_input(origin, devices):
    """An (N, 3) float32 input laid out otherwise than a pmap over ``devices``."""
    h = host(N)
    everywhere = jax.devices()
    if origin == "uncommitted_device0":
        return jnp.asarray(h)
    if origin == "committed_device3":
        return jax.device_put(h, everywhere[3])
    if origin == "numpy":
        return h
    if origin == "reversed_mesh":  # split alike, devices in another order
        return jax.device_put(h, NamedSharding(Mesh(np.array(everywhere[::-1]), ("r",)), P("r")))
    if origin == "replicated":
        return jax.device_put(h, NamedSharding(Mesh(np.array(everywhere), ("x",)), P()))
    if origin == "two_axis_mesh":  # rows over 2 devices, columns left whole
        mesh = Mesh(np.array(everywhere).reshape(2, N // 2), ("a", "b"))
        return jax.device_put(h, NamedSharding(mesh, P("a")))
    if origin == "other_half":  # the other half of the devices, split alike
        return jax.device_put(host(N // 2), NamedSharding(
            Mesh(np.array(everywhere[N // 2:]), ("o",)), P("o")))
    raise ValueError(origin)


MOVED = ["uncommitted_device0", "committed_device3", "numpy", "reversed_mesh",
         "replicated", "two_axis_mesh"]


def _moves(f):
    return stats(f)["resharded"]


@pytest.mark.parametrize("origin", MOVED + ["other_half"])
def test_moved_inputs_equal_jax_pmaps(origin):
    devices = jax.devices()[:N // 2] if origin == "other_half" else jax.devices()
    fn = lambda a: a * 2 + 1  # noqa: E731
    f = pmapkit.pmap(fn, axis_name="i", devices=devices)
    x = moved_input(origin, devices)
    # jax.pmap refuses an array committed elsewhere: it is given the values.
    theirs = jax.pmap(fn, axis_name="i", devices=devices)(
        x if origin in ("uncommitted_device0", "numpy") else np.asarray(x))
    for _ in range(3):  # the miss, then the hit path twice (the plan remembered)
        out = f(x)
        assert out.dtype == theirs.dtype and out.shape == theirs.shape
        assert_like_jax_pmap(out, theirs)
    assert stats(f)["misses"] == 1 and f._cache_size == 1
    if origin != "numpy":
        assert _moves(f) == 2


@pytest.mark.parametrize("dtype", [np.int32, np.bool_, jnp.bfloat16, np.float16])
def test_moved_inputs_keep_dtypes(dtype):
    f = pmapkit.pmap(lambda a: a, axis_name="i")
    g = jax.pmap(lambda a: a, axis_name="i")
    h = (np.arange(N * 5) % 3).astype(dtype).reshape(N, 5)
    for x in (jnp.asarray(h), jax.device_put(h, jax.devices()[5])):
        for _ in range(2):
            out = f(x)
            theirs = g(jnp.asarray(h))
            assert out.dtype == theirs.dtype == x.dtype
            assert_like_jax_pmap(out, theirs)


def test_several_moved_inputs_of_one_call():
    devices = jax.devices()
    f = pmapkit.pmap(lambda *xs: sum(xs[1:], xs[0]), axis_name="i")
    args = [moved_input(o, devices) for o in MOVED]
    args.append(make_input("device_put_named", devices))  # placed: not moved
    for _ in range(2):
        out = f(*args)
    np.testing.assert_array_equal(np.asarray(out), host(N) * len(args))
    assert _moves(f) == len(MOVED) - 1  # numpy is put, not moved


@pytest.mark.parametrize("origin", MOVED[:2] + MOVED[3:])
def test_donating_a_moved_input_leaves_the_callers_array(origin):
    devices = jax.devices()
    f = pmapkit.pmap(lambda a: a * 3, axis_name="i", donate_argnums=0)
    for _ in range(3):
        x = moved_input(origin, devices)
        out = f(x)
        np.testing.assert_array_equal(np.asarray(out), host(N) * 3)
        # A copy reached the program and was donated; the caller's array is
        # alive and unchanged (its buffers were never handed over).
        assert not x.is_deleted()
        np.testing.assert_array_equal(np.asarray(x), host(N))
    # Fed again after donating a copy of it: still the same values.
    np.testing.assert_array_equal(np.asarray(f(x)), host(N) * 3)


def test_a_deleted_moved_input_raises_jaxs_error():
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i")
    x = jnp.asarray(host(N))
    f(x)
    x.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        f(x)


def test_moved_typed_keys_equal_jax_pmaps():
    f = pmapkit.pmap(lambda k: jax.random.uniform(k, (2,)), axis_name="i")
    keys = jax.random.split(jax.random.key(0), N)  # uncommitted, on device 0
    theirs = jax.pmap(lambda k: jax.random.uniform(k, (2,)), axis_name="i")(keys)
    for _ in range(2):
        assert_like_jax_pmap(f(keys), theirs)


def test_pjit_still_refuses_arrays_committed_elsewhere_on_the_hit_path():
    devices = jax.devices()[:4]
    mesh = pmapkit.Mesh(np.array(devices), ("x",))
    f = pmapkit.pjit(lambda a: a + 1, in_axis_resources=P("x"), out_axis_resources=P("x"))
    with mesh:
        out = f(jnp.asarray(host(4)))  # uncommitted: moved
        out = f(jnp.asarray(host(4)))
        np.testing.assert_array_equal(np.asarray(out), host(4) + 1)
        with pytest.raises(ValueError, match="committed"):
            f(jax.device_put(host(4), jax.devices()[6]))


def test_moved_into_a_partly_replicated_pjit_input():
    # A 2x4 mesh, P("x"): each row block on 4 devices (repeated host slices).
    mesh = pmapkit.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    f = pmapkit.pjit(lambda a: a * 2, in_axis_resources=P("x"), out_axis_resources=P("x"),
                     donate_argnums=0)
    h = np.arange(64, dtype=np.float32).reshape(8, 8)
    for _ in range(3):
        x = jnp.asarray(h)  # uncommitted, device 0
        with mesh:
            out = f(x)
        np.testing.assert_array_equal(np.asarray(out), h * 2)
        assert not x.is_deleted()
        np.testing.assert_array_equal(np.asarray(x), h)


def test_fresh_equal_source_shardings_are_decided_once(monkeypatch):
    # jax.device_put(x, device) makes a new SingleDeviceSharding per call: an
    # equal one is known, so the layout question is not asked again.
    asked = count_layout_questions(monkeypatch)
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i")
    f(host(N))
    for _ in range(4):
        x = jax.device_put(host(N), jax.devices()[2])
        np.testing.assert_array_equal(np.asarray(f(x)), host(N) + 1)
    assert len(asked) == 1
    assert stats(f)["resharded"] == 4 and stats(f)["misses"] == 1


def test_an_equal_sharding_object_is_asked_by_identity_after_its_first_call():
    # A producer handing the same sharding object each call (one made by the
    # user, equal to the compiled one, not it) pays its ``==`` once: the
    # entry keeps it as the input's last equal one. A deleted array of that
    # sharding still gets JAX's error, and another equal object replaces it.
    devices = jax.devices()[:1]
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i", devices=devices)
    mesh = Mesh(np.array(devices), ("i",))
    user = NamedSharding(mesh, P("i"))
    x = jax.device_put(host(1), user)
    f(x)
    (entry,) = [e for c in f._shared.caches.values() for e in c.values()]
    assert entry.in_shardings[0] is not user and entry.in_shardings[0] == user
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), host(1) + 1)
    assert entry.last_equal[0] is user
    assert stats(f)["misses"] == 1 and stats(f)["equivalent_shardings"] == 0
    gone = jax.device_put(host(1), user)
    gone.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        f(gone)
    other = NamedSharding(mesh, P("i"))
    y = jax.device_put(host(1) * 2, other)
    np.testing.assert_array_equal(np.asarray(f(y)), host(1) * 2 + 1)
    assert entry.last_equal[0] is other and stats(f)["misses"] == 1
