"""Typed PRNG key arrays (``jax.random.key``, dtype ``key<impl>``) and float0
values through pmapkit.pmap and pmapkit.pjit, against jax.pmap / jax.jit:
same key data, dtypes, shapes and shardings; on the miss path and on the
compiled hit path (which must take key arrays already in place without the
Python fallback).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit.core.programs import compiled_program

N = 8
FLOAT0 = jax.dtypes.float0
PMAPS = {"jax": jax.pmap, "pmapkit": pmapkit.pmap}


@pytest.fixture
def fallbacks(monkeypatch):
    """Counts the hit path's Python fallback (resharding, unknown leaves)."""
    counter = {"n": 0}
    real = compiled_program.CompiledProgram.shard_fallback

    def counting(self, x, i):
        counter["n"] += 1
        return real(self, x, i)

    monkeypatch.setattr(compiled_program.CompiledProgram, "shard_fallback", counting)
    return counter


def _keys(n=N, seed=0, impl=None):
    return jax.random.split(jax.random.key(seed, impl=impl), n)


def _same_sharding(a, b):
    # Same mesh, same placement of every element. (Spelling the spec exactly
    # as jax.pmap does, trailing Nones included, is pinned by the parity
    # suites; here the placement is what keys and float0 must preserve.)
    assert a.sharding.mesh == b.sharding.mesh, (a.sharding, b.sharding)
    assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (a.sharding, b.sharding)


def _same_keys(a, b):
    assert jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key), a.dtype
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(a)),
                                  np.asarray(jax.random.key_data(b)))
    _same_sharding(a, b)


def _same(a, b):
    if jax.dtypes.issubdtype(getattr(a, "dtype", np.float32), jax.dtypes.prng_key):
        return _same_keys(a, b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
    if a.dtype == FLOAT0:
        assert type(a) is type(b)
        return
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    if isinstance(b, jax.Array):
        _same_sharding(a, b)


def _parity(fn, *args, calls=3, **options):
    """Run ``fn`` through both pmaps ``calls`` times (miss, then hits) and
    compare every output leaf; returns pmapkit's pmapped function."""
    ours, ref = pmapkit.pmap(fn, **options), jax.pmap(fn, **options)
    for _ in range(calls):
        out, want = ours(*args), ref(*args)
        ol, ot = jax.tree_util.tree_flatten(out)
        wl, wt = jax.tree_util.tree_flatten(want)
        assert ot == wt
        for o, w in zip(ol, wl):
            _same(o, w)
    return ours


# -- keys through pmap ------------------------------------------------------------
def test_split_keys_mapped():
    f = _parity(lambda k: (jax.random.split(k)[0], jax.random.normal(k, (3,))), _keys())
    assert f._cache_size == 1


def test_key_output_fed_back_takes_the_hit_path(fallbacks):
    step = pmapkit.pmap(lambda k: jax.random.split(k)[1])
    ref = jax.pmap(lambda k: jax.random.split(k)[1])
    k, r = step(_keys()), ref(_keys())        # miss: host-placed keys are moved
    after_miss = fallbacks["n"]
    for _ in range(4):
        k, r = step(k), ref(r)
        _same_keys(k, r)
    assert fallbacks["n"] == after_miss       # each output is already in place
    assert step._cache_size == 1


def test_keys_placed_by_jax_pmap_are_taken_as_is(fallbacks):
    placed = jax.pmap(lambda k: k)(_keys())
    f = pmapkit.pmap(lambda k: jax.random.bits(k, (2,)))
    f(placed)
    f(placed)
    assert fallbacks["n"] == 0


def test_broadcast_key_in_axes_none():
    _parity(lambda x, k: x + jax.random.uniform(k, ()),
            jnp.arange(N, dtype=jnp.float32), jax.random.key(3), in_axes=(0, None))


def test_keys_in_a_pytree_with_arrays():
    tree = {"k": _keys(seed=4), "x": jnp.ones((N, 2))}
    _parity(lambda t: {"x": t["x"] * jax.random.uniform(t["k"], (2,)),
                       "k": jax.random.fold_in(t["k"], 7)}, tree)


def test_key_out_axes_one_and_keys_on_axis_one():
    keys = jax.random.split(jax.random.key(5), (2, N))
    _parity(lambda k: jax.vmap(lambda k: jax.random.fold_in(k, 1))(k), keys,
            in_axes=1, out_axes=1)


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_key_implementations(impl):
    _parity(lambda k: (jax.random.split(k)[0], jax.random.uniform(k, (2,))),
            _keys(seed=6, impl=impl))


def test_implementations_with_one_physical_shape_do_not_share_entries():
    # rbg and unsafe_rbg keys are both uint32[..., 4]: the signature must
    # tell them apart, or one would run the other's program.
    f = pmapkit.pmap(lambda k: jax.random.uniform(k, (2,)))
    ref = jax.pmap(lambda k: jax.random.uniform(k, (2,)))
    for _ in range(2):
        for impl in ("rbg", "unsafe_rbg"):
            keys = _keys(seed=7, impl=impl)
            _same(f(keys), ref(keys))
    assert f._cache_size == 2


def test_keys_with_collectives():
    def body(k):
        u = jax.random.uniform(k, ())
        return u - jax.lax.pmean(u, "i"), jax.lax.all_gather(jax.random.key_data(k), "i")
    _parity(body, _keys(seed=8), axis_name="i")


def test_keys_under_jit_vmap_and_grad():
    f = pmapkit.pmap(lambda k, x: x * jax.random.uniform(k, x.shape))
    ref = jax.pmap(lambda k, x: x * jax.random.uniform(k, x.shape))
    keys, x = _keys(seed=9), jnp.ones((N, 3))
    _same(jax.jit(f)(keys, x), jax.jit(ref)(keys, x))
    batched = jax.random.split(jax.random.key(10), (2, N))
    _same(jax.vmap(f, in_axes=(0, None))(batched, x),
          jax.vmap(ref, in_axes=(0, None))(batched, x))
    g = lambda pm: jax.grad(lambda x: pm(keys, x).sum())(x)
    _same(g(f), g(ref))


def test_effectful_body_with_keys_and_float0():
    seen = []

    def body(k, z):
        jax.debug.callback(lambda: seen.append(1))
        return jax.random.split(k)[0], z

    z = np.zeros((N, 2), FLOAT0)
    _parity(body, _keys(seed=11), z, calls=2)
    jax.effects_barrier()
    assert len(seen) == 2 * 2 * N   # two implementations, two calls, N devices


def test_compiled_lowering_takes_keys():
    f = pmapkit.pmap(lambda k: jax.random.fold_in(k, 2))
    keys = _keys(seed=12)
    compiled = f.lower(keys).compile()
    _same_keys(compiled(keys), jax.pmap(lambda k: jax.random.fold_in(k, 2))(keys))


def test_deleted_key_array_is_refused():
    f = pmapkit.pmap(lambda k: jax.random.bits(k, ()))
    keys = jax.pmap(lambda k: k)(_keys(seed=13))
    f(keys)
    keys.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        f(keys)


# -- float0 through pmap ------------------------------------------------------------
def test_float0_input_and_output(fallbacks):
    z = np.zeros((N, 3), FLOAT0)
    f = _parity(lambda x, z: (x * 2, z), np.ones((N, 2), np.float32), z)
    assert f._cache_size == 1
    assert fallbacks["n"] == 0   # a float0 host array is put without Python


def test_float0_broadcast():
    _parity(lambda x, z: (x + 1, z), jnp.ones((N, 2)), np.zeros((5,), FLOAT0),
            in_axes=(0, None), out_axes=(0, None))


def test_grad_with_integer_argument_gives_float0():
    def run(pm):
        f = pm(lambda x, i: x * i.astype(x.dtype))
        return jax.grad(lambda x, i: f(x, i).sum(), argnums=(0, 1), allow_int=True)(
            jnp.ones(N), jnp.arange(N))

    (gx, gi), (rx, ri) = run(pmapkit.pmap), run(jax.pmap)
    _same(gx, rx)
    assert gi.dtype == ri.dtype == FLOAT0 and gi.shape == ri.shape


def test_jvp_with_float0_tangent():
    def run(pm):
        f = pm(lambda x, i: x * i.astype(x.dtype))
        x, i = jnp.ones(N), jnp.arange(N)
        return jax.jvp(f, (x, i), (jnp.ones(N), np.zeros((N,), FLOAT0)))

    for o, w in zip(run(pmapkit.pmap), run(jax.pmap)):
        _same(o, w)


# -- pjit --------------------------------------------------------------------------
DEVS = np.array(jax.devices()[:4]).reshape(2, 2)
MESH = pmapkit.Mesh(DEVS, ("x", "y"))
JAX_MESH = jax.sharding.Mesh(DEVS, ("x", "y"))


def _pjit_parity(fn, in_specs, out_specs, *args, calls=3):
    ours = pmapkit.pjit(fn, in_specs, out_specs)
    to_sharding = lambda s: NamedSharding(JAX_MESH, P() if s is None else s)
    is_leaf = lambda s: s is None or isinstance(s, P)
    ref = jax.jit(fn, in_shardings=jax.tree_util.tree_map(to_sharding, in_specs,
                                                          is_leaf=is_leaf),
                  out_shardings=jax.tree_util.tree_map(to_sharding, out_specs,
                                                       is_leaf=is_leaf))
    with MESH:
        for _ in range(calls):
            out, want = ours(*args), ref(*args)
            for o, w in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(want)):
                _same(o, w)
    return ours


@pytest.mark.parametrize("spec", [P("x"), P(("x", "y")), P(), None])
def test_pjit_keys(spec):
    fold = lambda k: jax.vmap(lambda k: jax.random.fold_in(k, 3))(k)
    f = _pjit_parity(fold, (spec,), spec, _keys(seed=14))
    assert f._cache_size == 1


def test_pjit_key_output_fed_back_takes_the_hit_path(fallbacks):
    f = pmapkit.pjit(lambda k: jax.vmap(lambda k: jax.random.split(k)[0])(k), P("x"), P("x"))
    with MESH:
        k = f(_keys(seed=15))
        after_miss = fallbacks["n"]
        for _ in range(3):
            k = f(k)
    assert fallbacks["n"] == after_miss
    ref = jax.jit(lambda k: jax.vmap(lambda k: jax.random.split(k)[0])(k),
                  out_shardings=NamedSharding(JAX_MESH, P("x")))
    r = _keys(seed=15)
    for _ in range(4):
        r = ref(r)
    _same_keys(k, r)


def test_pjit_keys_and_arrays_2d():
    keys = jax.random.split(jax.random.key(16), (4, 2))
    body = lambda k, x: (jax.vmap(jax.vmap(lambda k: jax.random.uniform(k, ())))(k) + x,
                         jax.random.clone(k))
    _pjit_parity(body, (P("x", "y"), P("x", "y")), (P("x", "y"), P("x")),
                 keys, jnp.ones((4, 2)))


def test_pjit_float0():
    z = np.zeros((4, 2), FLOAT0)
    f = _pjit_parity(lambda x, z: (x * 3, z), (P("x"), None), (P("x"), None),
                     jnp.ones((4, 2)), z)
    assert f._cache_size == 1


def test_pjit_grad_with_integer_argument():
    f = pmapkit.pjit(lambda x, i: x * i.astype(x.dtype), (P("x"), P("x")), P("x"))
    with MESH:
        gx, gi = jax.grad(lambda x, i: f(x, i).sum(), argnums=(0, 1),
                          allow_int=True)(jnp.ones(4), jnp.arange(4))
    np.testing.assert_array_equal(np.asarray(gx), np.arange(4, dtype=np.float32))
    assert gi.dtype == FLOAT0 and gi.shape == (4,)
