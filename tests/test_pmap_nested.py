"""``out_axes=None``, output shardings and nested ``pmapkit.pmap``.

- ``out_axes=None`` is classic pmap's (and jax.pmap's): any output may be
  unmapped; each device keeps its own value, no collective is added, and
  reading the array gives the first device's. Values, per-device buffers
  and shardings are compared with ``jax.pmap``'s.
- Output shardings equal jax.pmap's (``==``), so arrays move between the two
  without copies (checked on the buffers themselves).
- Nested pmaps run on one mesh axis per level; operands and results are laid
  out over all of them (one element per device). Nested ``jax.pmap`` no
  longer runs on jax 0.10.2 (its inner shard_map's mesh does not match the
  outer one), so nested results are checked against nested ``jax.vmap``.
"""
import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

import pmapkit

from _checks import check, data

INTERNAL = "_internal_pmap_axis_name"
pmap_module = importlib.import_module("pmapkit.pmap._pmap")  # the module (the package's pmap is the function)


def same_sharding_and_values(ours, theirs):
    ours_leaves, ours_tree = jax.tree_util.tree_flatten(ours)
    their_leaves, their_tree = jax.tree_util.tree_flatten(theirs)
    assert ours_tree == their_tree
    for o, t in zip(ours_leaves, their_leaves):
        assert o.sharding == t.sharding, (o.sharding, t.sharding)
        assert o.committed and t.committed
        assert o.shape == t.shape and o.dtype == t.dtype
        np.testing.assert_array_equal(np.asarray(o), np.asarray(t))
        # Down to the buffers: each device holds what jax.pmap's holds.
        assert [s.device for s in o.addressable_shards] == \
            [s.device for s in t.addressable_shards]
        for a, b in zip(shard_values(o), shard_values(t)):
            np.testing.assert_array_equal(a, b)


@pytest.fixture
def misses(monkeypatch):
    """Counts calls that take the Python miss path (validate and trace); a
    call served by the compiled hit path does not."""
    count = [0]
    real = pmap_module._prepare

    def prepare(*a, **k):
        count[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(pmap_module, "_prepare", prepare)
    return count


def shard_values(x):
    return [np.asarray(s.data) for s in x.addressable_shards]


def buffers(x):
    return sorted(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)


# ------------------------------------------------------------ out_axes=None --

@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_out_axes_none_of_a_mapped_input_is_the_first_devices(n):
    out = pmapkit.pmap(lambda x: x, out_axes=None)(jnp.arange(n))
    assert int(out) == 0
    assert out.committed
    # As jax.pmap: each device keeps its own value; reading gives device 0's.
    assert [int(v) for v in shard_values(out)] == list(range(n))
    same_sharding_and_values(out, jax.pmap(lambda x: x, out_axes=None)(jnp.arange(n)))


def test_out_axes_none_of_a_varying_computation():
    x = data(4, 3, seed=1)
    f = lambda v: jnp.sin(v) * 2 + lax.axis_index("i").astype(jnp.float32)
    ours = pmapkit.pmap(f, axis_name="i", out_axes=None)(x)
    np.testing.assert_allclose(np.asarray(ours), np.sin(x[0]) * 2, rtol=1e-6)
    for k, v in enumerate(shard_values(ours)):
        np.testing.assert_allclose(v, np.sin(x[k]) * 2 + k, rtol=1e-6)
    same_sharding_and_values(ours, jax.pmap(f, axis_name="i", out_axes=None)(x))


_COLLECTIVES = ("all-reduce", "all-gather", "collective-permute", "all-to-all",
                "reduce-scatter", "collective-broadcast")


def collectives(compiled_text):
    return {c: compiled_text.count(c + "(") + compiled_text.count(c + "-start(")
            for c in _COLLECTIVES}


@pytest.mark.parametrize("body", ["identity", "varying", "psum"])
def test_out_axes_none_compiles_no_collective_of_its_own(body):
    # The program's collectives are exactly jax.pmap's: none for an unmapped
    # output, the body's own psum where it has one.
    f = {"identity": lambda v: v,
         "varying": lambda v: v * 2 + lax.axis_index("i").astype(jnp.float32),
         "psum": lambda v: lax.psum(v, "i")}[body]
    x = data(8, 3, seed=11)
    ours = collectives(pmapkit.pmap(f, "i", out_axes=None).lower(x).compile().as_text())
    theirs = collectives(jax.pmap(f, "i", out_axes=None).lower(x).compile().as_text())
    assert ours == theirs
    want_all_reduce = 1 if body == "psum" else 0
    assert ours["all-reduce"] == want_all_reduce
    assert sum(ours.values()) == want_all_reduce


@pytest.mark.parametrize("body", ["psum", "unmapped_input", "constant"])
def test_out_axes_none_of_values_the_same_everywhere(body):
    x, c = data(8, 3, seed=2), data(3, seed=3)
    f = {"psum": lambda v, k: lax.psum(v, "i"),
         "unmapped_input": lambda v, k: k * 2,
         "constant": lambda v, k: jnp.float32(7)}[body]
    kw = dict(axis_name="i", in_axes=(0, None), out_axes=None)
    ours, theirs = pmapkit.pmap(f, **kw)(x, c), jax.pmap(f, **kw)(x, c)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)
    assert ours.sharding == theirs.sharding


def test_out_axes_none_mixed_pytree_against_jax_pmap():
    x = data(4, 2, 3, seed=4)
    f = lambda v: {"first": v * 3, "sum": lax.psum(v, "i"), "mapped": v - 1,
                   "idx": lax.axis_index("i")}
    kw = dict(axis_name="i", out_axes={"first": None, "sum": None, "mapped": 1,
                                       "idx": None})
    same_sharding_and_values(pmapkit.pmap(f, **kw)(x), jax.pmap(f, **kw)(x))


def test_out_axes_none_hit_path_and_numpy_input(misses):
    f = pmapkit.pmap(lambda v: v + 1, out_axes=None)
    for start in range(3):
        x = np.arange(4, dtype=np.float32) + start
        out = f(x)
        assert float(out) == start + 1
        np.testing.assert_array_equal(shard_values(out), x + 1)
    assert f._cache_size == 1 and misses[0] == 1


def test_out_axes_none_under_jit_and_vmap():
    x = data(4, 3, seed=5)
    f = pmapkit.pmap(lambda v: v * 2, out_axes=None)
    check(jax.jit(f)(x), x[0] * 2)
    xs = data(2, 4, 3, seed=6)
    check(jax.vmap(f)(xs), xs[:, 0] * 2)


def test_grad_of_out_axes_none_is_shared_as_jax_pmap_does():
    # The cotangent of an unmapped output is divided equally among the
    # devices (jax.pmap: 2 / 4 = 0.5 everywhere).
    x = data(4, 3, seed=7)
    f = pmapkit.pmap(lambda v: v * 2, out_axes=None)
    g = jax.grad(lambda x: jnp.sum(f(x)))(x)
    check(g, np.full_like(x, 0.5))
    theirs = jax.pmap(lambda v: v * 2, out_axes=None)
    check(g, jax.grad(lambda x: jnp.sum(theirs(x)))(x))


def test_grad_of_out_axes_none_psum_is_shared():
    x = data(4, 3, seed=8)
    f = pmapkit.pmap(lambda v: lax.psum(v * v, "i"), axis_name="i", out_axes=None)
    check(jax.grad(lambda x: jnp.sum(f(x)))(x), 2 * x)


# --------------------------------------------- shardings shared with jax.pmap --

@pytest.mark.parametrize("in_axes,out_axes,shape", [
    (0, 0, (4, 3)), (0, 1, (4, 3)), (1, 0, (3, 4)), (2, 2, (2, 3, 4)),
    (0, None, (4, 3))])
def test_shardings_equal_jax_pmaps(in_axes, out_axes, shape):
    x = data(*shape, seed=9)
    f = lambda v: lax.psum(v, "i") if out_axes is None else v * 2
    kw = dict(axis_name="i", in_axes=in_axes, out_axes=out_axes)
    ours, theirs = pmapkit.pmap(f, **kw)(x), jax.pmap(f, **kw)(x)
    same_sharding_and_values(ours, theirs)
    if out_axes is not None:
        assert ours.sharding.spec == P(*[None] * out_axes, "i")


def test_jax_pmap_output_round_trips_through_pmapkit_without_copies():
    # Donating an identity lets the output alias the input: same buffers all
    # the way only if neither side copied (resharded) what it was given.
    x = jax.pmap(lambda v: v + 1)(data(8, 3, seed=10))
    ptrs = buffers(x)
    y = pmapkit.pmap(lambda v: v, donate_argnums=0)(x)
    assert x.is_deleted()
    assert buffers(y) == ptrs
    z = jax.pmap(lambda v: v, donate_argnums=0)(y)
    assert y.is_deleted()
    assert buffers(z) == ptrs


def test_jax_pmap_output_taken_as_is_on_the_hit_path(misses):
    theirs = jax.pmap(lambda v: v * 2)
    ours = pmapkit.pmap(lambda v: v, donate_argnums=0)
    for _ in range(3):  # the first call misses, the others hit
        x = theirs(data(4, 2, seed=11))
        ptrs = buffers(x)
        y = ours(x)
        assert x.is_deleted() and buffers(y) == ptrs
    assert ours._cache_size == 1 and misses[0] == 1


# ------------------------------------------------------------------ nested --

def nested_vmap(f, inner_in=0, outer_in=0, inner_out=0, outer_out=0):
    return jax.vmap(jax.vmap(f, in_axes=inner_in, out_axes=inner_out, axis_name="i"),
                    in_axes=outer_in, out_axes=outer_out, axis_name="j")


def one_element_per_device(out, mapped_dims):
    """Every device holds its own single element of the mapped dims."""
    n = int(np.prod([out.shape[d] for d in mapped_dims]))
    shards = out.addressable_shards
    assert len({s.device for s in shards}) == len(shards) == n
    for s in shards:
        assert all(s.data.shape[d] == 1 for d in mapped_dims), s.data.shape
    starts = {tuple(s.index[d].start for d in mapped_dims) for s in shards}
    assert len(starts) == n


def test_issue_nested_in_axes_one():
    # outer over the 2, inner over the 3 (axis 1 of each (4, 3) slice): 6 devices
    x = jnp.ones((2, 4, 3))
    out = pmapkit.pmap(pmapkit.pmap(lambda v: v, in_axes=1, out_axes=0))(x)
    check(out, np.ones((2, 3, 4), np.float32))
    one_element_per_device(out, (0, 1))


def test_issue_nested_constant_output():
    out = pmapkit.pmap(pmapkit.pmap(lambda v: 3))(jnp.ones((2, 4, 3)))
    check(out, np.full((2, 4), 3, np.int32))
    one_element_per_device(out, (0, 1))


def test_unnamed_nested_levels_get_their_own_mesh_axes():
    x = data(2, 4, 3, seed=12)
    out = pmapkit.pmap(pmapkit.pmap(lambda v: v * 2))(x)
    check(out, x * 2)
    assert out.sharding.spec == P(INTERNAL, INTERNAL + "_1")
    one_element_per_device(out, (0, 1))


def test_nested_output_spec_follows_both_out_axes():
    x = data(2, 4, 3, seed=13)
    inner = pmapkit.pmap(lambda v: v + 1, axis_name="i", out_axes=1)
    out = pmapkit.pmap(inner, axis_name="j", out_axes=1)(x)
    check(out, nested_vmap(lambda v: v + 1, inner_out=1, outer_out=1)(x))
    # per outer device (3, 4) -> the global (3, 2, 4): j on dim 1, i on dim 2
    assert out.sharding.spec == P(None, "j", "i")
    one_element_per_device(out, (1, 2))


def test_nested_output_through_elementwise_ops_stays_spread():
    x = data(2, 4, 3, seed=14)
    inner = pmapkit.pmap(lambda v: v * 2, axis_name="i")
    out = pmapkit.pmap(lambda v: jnp.tanh(inner(v)) + 1, axis_name="j")(x)
    check(out, np.tanh(x * 2) + 1)
    one_element_per_device(out, (0, 1))


def test_nested_inner_out_axes_none_is_spread_over_the_outer_axis_only():
    x = data(2, 4, 3, seed=15)
    inner = pmapkit.pmap(lambda v: v * 3, axis_name="i", out_axes=None)
    out = pmapkit.pmap(inner, axis_name="j")(x)
    check(out, x[:, 0] * 3)
    assert out.sharding.spec == P("j")


def test_nested_output_fed_back_is_not_copied():
    f = pmapkit.pmap(pmapkit.pmap(lambda v: v, axis_name="i", in_axes=1, out_axes=1),
                     axis_name="j", donate_argnums=0)
    x = jax.device_put(data(2, 3, 4, seed=16))
    y = f(x)
    ptrs = buffers(y)
    z = f(y)  # y already has the layout f takes
    assert y.is_deleted() and buffers(z) == ptrs
    check(z, data(2, 3, 4, seed=16))


def test_three_levels_use_all_devices():
    x = data(2, 2, 2, 3, seed=17)
    f = lambda v: v * lax.psum(v, "a") + lax.axis_index("c").astype(jnp.float32)
    inner = pmapkit.pmap(f, axis_name="c")
    mid = pmapkit.pmap(inner, axis_name="b")
    out = pmapkit.pmap(mid, axis_name="a")(x)
    ref = jax.vmap(jax.vmap(jax.vmap(f, axis_name="c"), axis_name="b"),
                   axis_name="a")(x)
    check(out, ref)
    assert out.sharding.spec == P("a", "b", "c")
    one_element_per_device(out, (0, 1, 2))


def test_nested_pmap_compiles_once_and_hits(misses):
    f = pmapkit.pmap(pmapkit.pmap(lambda v: v - lax.pmean(v, "i"), axis_name="i"),
                     axis_name="j")
    x = data(2, 4, 3, seed=0)
    y = f(x)
    assert misses[0] == 2  # the outer call and the inner one it traces
    for _ in range(3):  # numpy input, then its own output: both hit
        check(f(x), x - x.mean(1, keepdims=True))
        check(f(y), y - np.asarray(y).mean(1, keepdims=True))
    assert f._cache_size == 1 and misses[0] == 2


# ------------------------------------- property: nested in/out_axes vs vmap --

J, I, D = 2, 4, 3


def _arrange(base, outer_in, inner_in):
    """The global operand whose per-device slice on device (j, i) is
    ``base[j, i]`` when mapped with ``inner_in`` inside ``outer_in``; an
    unmapped level takes index 0 of ``base`` there (see ``_broadcast``)."""
    per_outer = base[:, 0] if inner_in is None else np.moveaxis(base, 1, 1 + inner_in)
    return per_outer[0] if outer_in is None else np.moveaxis(per_outer, 0, outer_in)


def _broadcast(base, outer_in, inner_in):
    """``base`` as every device sees it: index 0 repeated on unmapped levels."""
    if inner_in is None:
        base = np.broadcast_to(base[:, :1], base.shape)
    if outer_in is None:
        base = np.broadcast_to(base[:1], base.shape)
    return base


def _place(ref, inner_out, outer_out):
    """From a result laid out (J, I, ...) to the pmaps' out_axes placement;
    an unmapped level keeps the first device's value."""
    ref = np.asarray(ref)
    ref = ref[:, 0] if inner_out is None else np.moveaxis(ref, 1, 1 + inner_out)
    return ref[0] if outer_out is None else np.moveaxis(ref, 0, outer_out)


BODIES = {
    # name: (body(v, k) -> per-device rank-1 value or scalar, output rank)
    "elementwise": (lambda v, k: jnp.sin(v) * 2 + k, 1),
    "varying": (lambda v, k: v + (lax.axis_index("i") * 10
                                  + lax.axis_index("j") * 100).astype(jnp.float32), 1),
    "psum_inner": (lambda v, k: lax.psum(v, "i"), 1),
    "psum_both": (lambda v, k: lax.psum(v, ("i", "j")), 1),
    "constant": (lambda v, k: jnp.float32(3), 0),
    "unmapped": (lambda v, k: k * 2, 1),
}


@st.composite
def nested_cases(draw):
    body = draw(st.sampled_from(sorted(BODIES)))
    rank = BODIES[body][1]
    inner_in = draw(st.sampled_from([0, 1]))
    outer_in = draw(st.sampled_from([0, 1, 2]))
    inner_k = draw(st.sampled_from([None, 0]))
    inner_out = draw(st.sampled_from([None, *range(rank + 1)]))
    outer_rank = rank + (inner_out is not None)
    outer_out = draw(st.sampled_from([None, *range(outer_rank + 1)]))
    return body, inner_in, outer_in, inner_k, inner_out, outer_out


@settings(max_examples=30, deadline=None, derandomize=True)
@given(nested_cases())
def test_nested_in_out_axes_match_nested_vmap(case):
    body, inner_in, outer_in, inner_k, inner_out, outer_out = case
    f = BODIES[body][0]
    base = data(J, I, D, seed=18)
    kbase = data(J, I, D, seed=19)
    x = _arrange(base, outer_in, inner_in)
    k = _arrange(kbase, None, inner_k)  # never mapped over the outer axis
    inner = pmapkit.pmap(f, axis_name="i", in_axes=(inner_in, inner_k),
                         out_axes=inner_out)
    outer = pmapkit.pmap(inner, axis_name="j", in_axes=(outer_in, None),
                         out_axes=outer_out)
    out = outer(x, k)
    # The reference maps everything at 0 and places the result afterwards.
    ref = nested_vmap(f)(jnp.asarray(base),
                         jnp.asarray(_broadcast(kbase, None, inner_k)))
    check(out, _place(ref, inner_out, outer_out))
    mapped = [d for d in (outer_out,) if d is not None]
    if inner_out is not None:
        mapped.append(inner_out + (outer_out is not None and outer_out <= inner_out))
    spec = [None] * out.ndim
    names = (["j"] if outer_out is not None else []) + \
        (["i"] if inner_out is not None else [])
    for name, d in zip(names, mapped):
        spec[d] = name
    while spec and spec[-1] is None:
        spec.pop()
    assert out.sharding.spec == P(*spec)
    assert out.sharding == NamedSharding(out.sharding.mesh, P(*spec))


# ----------------------------------------- nested under JAX transformations --

def test_grad_of_nested_with_inner_out_axes_none_and_in_axes_one():
    f = lambda v: jnp.sin(v) * lax.psum(v, "j")
    inner = pmapkit.pmap(f, axis_name="i", in_axes=1, out_axes=None)
    outer = pmapkit.pmap(inner, axis_name="j")
    x = data(2, 3, 4, seed=20)  # per outer device (3, 4): inner maps the 4
    every_inner = nested_vmap(f, inner_in=1)  # (2, 4, 3): each inner device's

    # The value read is the first inner device's: column 0 of each (3, 4).
    check(outer(x), every_inner(x)[:, 0])
    loss = lambda y: jnp.sum(jnp.cos(y) * 1.5)
    # As with jax.pmap, every inner device holds (and differentiates the loss
    # at) its own value, and the cotangent is shared equally among them.
    _, pullback = jax.vjp(every_inner, x)
    (want,) = pullback(jax.grad(loss)(every_inner(x)) / 4)
    check(jax.grad(lambda x: loss(outer(x)))(x), want)


def test_jit_and_vmap_of_unnamed_nested():
    nested = pmapkit.pmap(pmapkit.pmap(lambda v: v * 2 + 1, in_axes=1))
    x = data(2, 3, 4, seed=21)
    ref = np.swapaxes(x, 1, 2) * 2 + 1
    check(jax.jit(nested)(x), ref)
    xs = data(3, 2, 3, 4, seed=22)
    check(jax.vmap(nested)(xs), np.swapaxes(xs, 2, 3) * 2 + 1)


def test_nested_on_reversed_devices():
    devices = jax.devices()[::-1]
    inner = pmapkit.pmap(lambda v: v + lax.axis_index("i").astype(jnp.float32),
                         axis_name="i")
    out = pmapkit.pmap(inner, axis_name="j", devices=devices)(data(2, 4, 3, seed=23))
    assert out.sharding.mesh.devices.tolist() == np.array(devices).reshape(2, 4).tolist()
    # outer index j, inner index i sits on devices[4 * j + i]
    for s in out.addressable_shards:
        j, i = s.index[0].start, s.index[1].start
        assert s.device == devices[4 * j + i]
