"""Behaviour-parity tests: ``pmapkit.pmap`` must act like classic ``jax.pmap``.

Every test body runs once per implementation through the ``pmap_impl``
fixture and checks results against a reference computed *without* pmap
(numpy, or plain jnp over the mapped axis).  ``check`` also pins dtype, shape,
pytree structure, result type (``jax.Array``) and the set of devices holding
the result, since those are part of pmap's observable contract.

The ``cross`` tests compare the fixture implementation directly with
``jax.pmap``; the ``error`` tests pin exception types (plus a substring only
where both the classic and the current jax messages share one).

Test names deliberately avoid the substring "jax" so ``-k jax`` selects only
the ``[jax]`` parametrization.  Arrays are tiny and most tests compile once:
compilation dominates the runtime.
"""
import collections
import functools

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax


@pytest.fixture(params=["jax", "pmapkit"])
def pmap_impl(request):
    if request.param == "jax":
        return jax.pmap
    # Imported here so collection works before pmapkit exists; a missing or
    # broken pmapkit must fail loudly, not skip.
    import pmapkit
    return functools.partial(_ShardingParity, pmapkit.pmap)


class _ShardingParity:
    """``pmapkit.pmap(fun, **kw)`` whose every call first runs ``jax.pmap``
    with the same options and arguments and requires each output's sharding
    to equal jax.pmap's (``==``: mesh, devices and spec), so arrays pass
    between the two without copies.

    Not compared: functions donating buffers (jax.pmap's run would delete
    the inputs pmapkit's run needs), and calls that jax.pmap refuses while
    pmapkit runs them, but only the known cases in ``_JAX_PMAP_CANNOT_RUN``;
    any other jax.pmap failure on a call pmapkit runs fails the test. Where
    both refuse, pmapkit's error propagates for the test to check."""

    def __init__(self, pmap, fun, *args, **kw):
        self._ours = pmap(fun, *args, **kw)
        self._kw = kw
        self._theirs = (None if "donate_argnums" in kw
                        else jax.pmap(fun, *args, **kw))

    def __call__(self, *args, **kwargs):
        if self._theirs is None:
            return self._ours(*args, **kwargs)
        try:
            ref, refused = self._theirs(*args, **kwargs), None
        except Exception as exc:  # noqa: BLE001 -- judged below, once pmapkit has run
            ref, refused = None, exc
        out = self._ours(*args, **kwargs)
        if refused is None:
            assert_same_shardings(out, ref)
        elif not any(known(self._kw, refused) for known in _JAX_PMAP_CANNOT_RUN):
            raise AssertionError(
                "jax.pmap refused a call pmapkit.pmap ran, and this is not a known "
                f"jax.pmap limitation: {type(refused).__name__}: {refused}") from refused
        return out


def _negative_in_axes(kw, exc):
    """jax 0.10.2's jax.pmap (a jit(shard_map) shim) shards an argument as if
    its in_axes were 0 when it is negative: IndivisibleError ("array axis 0 is
    partitioned") or, where axis 0 happens to divide, a squeeze ValueError.
    Classic pmap counted a negative in_axes from the end, as vmap does."""
    in_axes = jax.tree_util.tree_leaves(kw.get("in_axes", 0))
    return (any(isinstance(a, int) and a < 0 for a in in_axes)
            and isinstance(exc, ValueError)
            and ("implies that array axis 0 is partitioned" in str(exc)
                 or "cannot select an axis to squeeze out" in str(exc)))


# The calls classic pmap ran and jax 0.10.2's jax.pmap cannot: each a
# predicate on (the pmap's options, jax.pmap's exception).
def _non_string_axis_name(kw, exc):
    """jax 0.10.2's jax.pmap puts its axis_name in a mesh, whose Shardy
    lowering takes strings only (``sdy.MeshAxisAttr.get()``: "incompatible
    function arguments"). Classic pmap took any hashable name."""
    name = kw.get("axis_name")
    return (name is not None and not isinstance(name, str)
            and isinstance(exc, TypeError) and "incompatible function arguments" in str(exc))


_JAX_PMAP_CANNOT_RUN = (_negative_in_axes, _non_string_axis_name)


def assert_same_shardings(out, ref):
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    assert out_tree == ref_tree, (out_tree, ref_tree)
    for o, r in zip(out_leaves, ref_leaves):
        assert o.sharding == r.sharding, (o.sharding, r.sharding)
        assert o.committed == r.committed


# For classic behaviour that jax 0.10.2's jax.pmap (a jit(shard_map) shim)
# no longer supports: run against pmapkit only, with a numpy reference.
pmapkit_only = pytest.mark.parametrize("pmap_impl", ["pmapkit"], indirect=True)


@pytest.fixture
def x64():
    # Scoped x64 so the flag cannot leak into other tests.
    prev = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", prev)


# ----------------------------------------------------------------- helpers --

_TOL = {
    np.dtype(np.float16): 2e-3,
    np.dtype(jnp.bfloat16): 2e-2,
    np.dtype(np.float32): 1e-5,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex128): 1e-12,
}


def devs(n):
    return jax.devices()[:n]


def _device_set(devices):
    return set(devs(devices)) if isinstance(devices, int) else set(devices)


def _assert_values(got, want, dtype, tol=None):
    if jnp.issubdtype(dtype, jnp.inexact):
        tol = _TOL[np.dtype(dtype)] if tol is None else tol
        wide = np.complex128 if jnp.issubdtype(dtype, jnp.complexfloating) else np.float64
        np.testing.assert_allclose(np.asarray(got).astype(wide),
                                   np.asarray(want).astype(wide), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def check(out, expected, devices, tol=None):
    """Assert ``out`` matches ``expected`` leaf by leaf: type, shape, dtype,
    values, and that each leaf lives exactly on ``devices`` (an int n means
    the first n devices)."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    exp_leaves, exp_tree = jax.tree_util.tree_flatten(expected)
    assert out_tree == exp_tree, f"tree mismatch: {out_tree} vs {exp_tree}"
    want_devices = _device_set(devices)
    for o, e in zip(out_leaves, exp_leaves):
        e = np.asarray(e)
        assert isinstance(o, jax.Array), type(o)
        assert o.shape == e.shape, (o.shape, e.shape)
        assert o.dtype == e.dtype, (o.dtype, e.dtype)
        assert set(o.sharding.device_set) == want_devices
        _assert_values(o, e, e.dtype, tol)


def check_placement(out, devices, axis=0):
    """Slice i along the mapped ``axis`` must sit on ``devices[i]`` (classic
    pmap's device order contract)."""
    devices = list(devices)
    shards = out.addressable_shards
    assert len(shards) == len(devices)
    for shard in shards:
        start, stop, _ = shard.index[axis].indices(out.shape[axis])
        assert stop - start == 1
        assert devices.index(shard.device) == start, (shard.device, start)


def cross_check(out, ref):
    """Compare the fixture impl's output directly against jax.pmap's."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    assert out_tree == ref_tree
    for o, r in zip(out_leaves, ref_leaves):
        assert isinstance(o, jax.Array)
        assert o.shape == r.shape and o.dtype == r.dtype
        assert o.sharding == r.sharding, (o.sharding, r.sharding)
        _assert_values(o, r, r.dtype)


def farange(*shape, dtype=np.float32, start=0):
    return (np.arange(np.prod(shape)) + start).reshape(shape).astype(dtype)


# ------------------------------------------------------------ basic mapping --

@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_elementwise_and_pmean_over_mapped_sizes(pmap_impl, n):
    # The mapped size picks the first n devices; collectives see exactly n.
    x = farange(n, 3)
    f = pmap_impl(lambda v: (jnp.sin(v) * 2 + 1, v - lax.pmean(v, "i")), axis_name="i")
    out = f(x)
    check(out, (np.sin(x) * 2 + 1, x - x.mean(0, keepdims=True)), n)
    check_placement(out[0], devs(n))


class _AxisTag:
    """A hashable, non-string axis name."""

    def __hash__(self):
        return hash("axis-tag")

    def __eq__(self, other):
        return isinstance(other, _AxisTag)


@pmapkit_only
def test_non_string_axis_name_names_the_axis(pmap_impl):
    # Classic pmap accepted any hashable axis_name (jax.pmap on jax 0.10
    # fails deep in lowering: sdy.MeshAxisAttr.get() "incompatible function
    # arguments"); pmapkit traces with it and gives the mesh a string for it
    # (tests/test_pmap_axis_names.py holds the classic values).
    tag = _AxisTag()
    x = farange(8)
    out = pmap_impl(lambda v: lax.psum(v, tag), axis_name=tag)(x)
    np.testing.assert_array_equal(out, np.full(8, x.sum(), np.float32))


# ------------------------------------------------------------------ in_axes --

def test_in_axes_none_broadcasts_unmapped_arg(pmap_impl):
    x, w = farange(4, 3), farange(3, start=1)
    f = pmap_impl(lambda a, b: a * b + lax.psum(a, "i"), axis_name="i",
                  in_axes=(0, None))
    check(f(x, w), x * w + x.sum(0), 4)


@pytest.mark.parametrize("axis,per_dev", [(1, (3,)), (1, (2, 3)), (2, (2, 3))],
                         ids=["ax1-2d", "ax1-3d", "ax2-3d"])
def test_in_axes_int_nonzero_maps_that_axis(pmap_impl, axis, per_dev):
    n = 4
    base = farange(n, *per_dev)  # canonical layout: mapped axis first
    x = np.moveaxis(base, 0, axis)
    f = pmap_impl(lambda v: v * 10 + v.sum(), in_axes=axis)
    red = tuple(range(1, base.ndim))
    check(f(x), base * 10 + base.sum(axis=red, keepdims=True), n)


def test_in_axes_dict_prefix_per_leaf(pmap_impl):
    n = 4
    a, b, c = farange(n, 3), farange(2, n, start=5), farange(5, start=1)
    f = pmap_impl(lambda t: {"s": t["a"] * t["c"][:3], "b": t["b"] + t["c"][0]},
                  in_axes=({"a": 0, "b": 1, "c": None},))
    check(f({"a": a, "b": b, "c": c}), {"s": a * c[:3], "b": b.T + c[0]}, n)


def test_in_axes_nested_tuple_prefix(pmap_impl):
    n = 4
    x, c, y = farange(n, 3), farange(3, start=2), farange(3, n, start=7)
    f = pmap_impl(lambda xc, yy: xc[0] * xc[1] + yy, in_axes=((0, None), 1))
    check(f((x, c), y), x * c + y.T, n)


def test_in_axes_int_leaf_covers_whole_subtree(pmap_impl):
    # An int in_axes entry applies to every leaf of that argument's pytree.
    n = 2
    x1, x2, s = farange(n, 3), farange(n, 2, start=4), np.float32(3.0)
    f = pmap_impl(lambda tree, k: [tree[0] + k, {"k": tree[1]["k"] * k}],
                  in_axes=(0, None))
    check(f([x1, {"k": x2}], s), [x1 + s, {"k": x2 * s}], n)


def test_in_axes_tuple_spans_static_args(pmap_impl):
    # in_axes is indexed by *all* positional args, static ones included.
    n = 4
    x, y = farange(n), farange(2, n, start=1)
    f = pmap_impl(lambda v, k, w: v * k + w, static_broadcasted_argnums=1,
                  in_axes=(0, None, 1))
    check(f(x, 3, y), x[:, None] * 3 + y.T, n)


@pmapkit_only
def test_negative_in_axes_count_from_the_end(pmap_impl):
    # jax 0.10.2 mis-handles negative in_axes: the PartitionSpec is built as
    # if axis were 0, giving IndivisibleError ("array axis 0 is partitioned 4
    # times, but the dimension size is 3") or a squeeze ValueError. Expected
    # semantics follow vmap's (axis -1 == last axis).
    # NOTE: classic pmap docs only promised non-negative in_axes.
    n = 4
    x, y = farange(3, n), farange(n, 3, start=1)
    f = pmap_impl(lambda a, b: a + b, in_axes=(-1, -2))
    check(f(x, y), x.T + y, n)


# -------------------------------------------------------- keyword arguments --

def test_kwargs_mapped_on_axis0_despite_in_axes(pmap_impl):
    # Keyword args ignore in_axes and are always mapped over axis 0.
    n = 4
    x, y = farange(3, n), farange(n, 3, start=100)
    f = pmap_impl(lambda a, b: a + b, in_axes=1)
    check(f(x, b=y), x.T + y, n)


def test_kwargs_pytree_mapped_while_positional_broadcast(pmap_impl):
    n = 2
    c, m, b = farange(3, start=1), farange(n, start=2), farange(n, 3)
    f = pmap_impl(lambda base, cfg: (base * cfg["m"] + cfg["b"]
                                    + lax.axis_index("i").astype(base.dtype)),
                  axis_name="i", in_axes=(None,))
    expected = c * m[:, None] + b + np.arange(n, dtype=np.float32)[:, None]
    check(f(c, cfg={"m": m, "b": b}), expected, n)


# ----------------------------------------------------------------- out_axes --

@pytest.mark.parametrize("out_axes", [1, 2])
def test_out_axes_int_places_mapped_axis(pmap_impl, out_axes):
    n = 4
    x = farange(n, 2, 3)
    out = pmap_impl(lambda v: v * 2 + 1, out_axes=out_axes)(x)
    check(out, np.moveaxis(x * 2 + 1, 0, out_axes), n)
    check_placement(out, devs(n), axis=out_axes)


@pytest.mark.parametrize("shape", [(4, 3), (4, 2, 3)], ids=["rank1", "rank2"])
@pytest.mark.parametrize("out_axes", [-1, -2])
def test_negative_out_axes_match_vmap(shape, out_axes):
    # A negative out_axes counts from the end of the result, which has one
    # more dim than the per-device value: the values jax.vmap gives with the
    # same out_axes, laid out over the devices on that dim. The reference is
    # vmap, not jax.pmap: JAX 0.4.30's pmap asserted on a negative out_axes,
    # and JAX 0.10's gives another shape ((12, 1) for (3, 4) on rank 1).
    import pmapkit
    n = shape[0]
    x = farange(*shape)
    body = lambda v: v * 2 + 1
    out = pmapkit.pmap(body, out_axes=out_axes)(x)
    want = np.asarray(jax.vmap(body, out_axes=out_axes)(x))
    assert want.shape[out_axes] == n
    check(out, want, n)
    check_placement(out, devs(n), axis=out_axes % want.ndim)


def test_out_axes_none_for_psum_result(pmap_impl):
    # A psum'd value is identical on every device; out_axes=None returns it
    # once, unstacked, still held by the participating devices.
    n = 4
    x = farange(n, 3)
    out = pmap_impl(lambda v: lax.psum(v, "i"), axis_name="i", out_axes=None)(x)
    check(out, x.sum(0), n)
    check(out + 1, x.sum(0) + 1, n)  # usable in eager ops afterwards


def test_out_axes_none_for_broadcast_input(pmap_impl):
    n = 2
    x, c = farange(n, 3), farange(3, start=5)
    f = pmap_impl(lambda v, k: (v + k, k * 2), in_axes=(0, None), out_axes=(0, None))
    check(f(x, c), (x + c, c * 2), n)


def test_out_axes_pytree_mixed(pmap_impl):
    n = 4
    x = farange(n, 3)
    f = pmap_impl(lambda v: (v * 2, {"sum": lax.psum(v, "i"), "w": v + 1}),
                  axis_name="i", out_axes=(1, {"sum": None, "w": 0}))
    check(f(x), ((x * 2).T, {"sum": x.sum(0), "w": x + 1}), n)


# ------------------------------------------------ static_broadcasted_argnums --

def test_static_int_argnum_changes_result(pmap_impl):
    # The static value drives Python control flow, so it must be a constant.
    n = 4
    x = farange(n, 2)
    f = pmap_impl(lambda v, k: v * k if k > 2 else v - k, static_broadcasted_argnums=1)
    check(f(x, 2), x - 2, n)
    check(f(x, 5), x * 5, n)


def test_static_tuple_argnums_with_strings(pmap_impl):
    def repeat(mode, v, reps):
        for _ in range(reps):
            v = v + 1 if mode == "add" else v * 2
        return v

    n = 2
    x = farange(n, 3)
    f = pmap_impl(repeat, static_broadcasted_argnums=(0, 2))
    check(f("add", x, 2), x + 2, n)
    check(f("mul", x, 3), x * 8, n)


# ---------------------------------------------- devices / backend / axis_size --

def test_devices_subset_first_four(pmap_impl):
    d = jax.devices()[:4]
    x = farange(4, 3)
    f = pmap_impl(lambda v: v - lax.psum(v, "i"), axis_name="i", devices=d)
    out = f(x)
    check(out, x - x.sum(0), d)
    check_placement(out, d)


def test_devices_reversed_subset_orders_shards(pmap_impl):
    # devices[i] receives slice i, so axis_index follows the given order.
    d = jax.devices()[::-1][:4]
    x = farange(4, 2)
    f = pmap_impl(lambda v: v + 100 * lax.axis_index("i").astype(v.dtype),
                  axis_name="i", devices=d)
    out = f(x)
    check(out, x + 100 * np.arange(4, dtype=np.float32)[:, None], d)
    check_placement(out, d)


def test_backend_cpu(pmap_impl):
    x = farange(8, 2)
    out = pmap_impl(lambda v: lax.pmax(v, "i") - v, axis_name="i", backend="cpu")(x)
    check(out, x.max(0) - x, jax.devices("cpu"))


def test_axis_size_equal_to_mapped_size(pmap_impl):
    x = farange(4, 2)
    f = pmap_impl(lambda v: v * lax.psum(1, "i"), axis_name="i", axis_size=4)
    check(f(x), x * 4, 4)


# ----------------------------------------------------------- donate_argnums --

def test_donated_sharded_input_is_deleted(pmap_impl):
    f = pmap_impl(lambda v: v * 2 + 1, donate_argnums=0)
    x0 = farange(4, 3)
    x1 = f(x0)  # already laid out the way f wants its input
    x2 = f(x1)
    assert x1.is_deleted()
    with pytest.raises(RuntimeError):
        np.asarray(x1)
    check(x2, (x0 * 2 + 1) * 2 + 1, 4)


def test_donate_argnums_counted_with_static_args(pmap_impl):
    # donate_argnums refers to positions in the full argument list.
    f = pmap_impl(lambda k, v, w: v * k + w, static_broadcasted_argnums=0,
                  donate_argnums=2)
    v, w0 = farange(4, 2), farange(4, 2, start=1)
    v_dev = jnp.asarray(v)
    w1 = f(3, v_dev, w0)
    w2 = f(3, v_dev, w1)
    assert w1.is_deleted()
    assert not v_dev.is_deleted()
    check(w2, v * 3 + (v * 3 + w0), 4)


# -------------------------------------------------------------- collectives --

@pytest.mark.parametrize("name,op,ref", [
    ("psum", lax.psum, np.sum),
    ("pmean", lax.pmean, np.mean),
    ("pmax", lax.pmax, np.max),
    ("pmin", lax.pmin, np.min),
], ids=["psum", "pmean", "pmax", "pmin"])
def test_reduction_collectives(pmap_impl, name, op, ref):
    x = (farange(8, 3) * 37 % 11 - 5).astype(np.float32)  # mixed signs, unsorted
    out = pmap_impl(lambda v: op(v, "i"), axis_name="i")(x)
    check(out, np.broadcast_to(ref(x, axis=0), x.shape), 8)


@pytest.mark.parametrize("tiled,axis", [(False, 0), (True, 0), (False, 1), (True, 1)],
                         ids=["stack-ax0", "tiled-ax0", "stack-ax1", "tiled-ax1"])
def test_all_gather(pmap_impl, tiled, axis):
    n = 4
    x = farange(n, 2, 3)
    out = pmap_impl(lambda v: lax.all_gather(v, "i", axis=axis, tiled=tiled),
                    axis_name="i")(x)
    gathered = np.concatenate(list(x), axis=axis) if tiled else np.stack(list(x), axis=axis)
    check(out, np.broadcast_to(gathered, (n,) + gathered.shape), n)


@pytest.mark.parametrize("kind", ["ring", "partial"])
def test_ppermute(pmap_impl, kind):
    n = 8
    x = farange(n, 2, start=1)
    if kind == "ring":
        perm = [(i, (i + 1) % n) for i in range(n)]
        expected = np.roll(x, 1, axis=0)
    else:
        # Devices that nobody sends to receive zeros.
        perm = [(i, i + 1) for i in range(n - 1)]
        expected = np.concatenate([np.zeros_like(x[:1]), x[:-1]])
    out = pmap_impl(lambda v: lax.ppermute(v, "i", perm), axis_name="i")(x)
    check(out, expected, n)


@pytest.mark.parametrize("tiled", [False, True], ids=["untiled", "tiled"])
def test_psum_scatter(pmap_impl, tiled):
    n = 4
    if tiled:
        x = farange(n, n * 2)  # each device ends up with a 2-wide slice
        expected = x.sum(0).reshape(n, 2)
    else:
        x = farange(n, n, 2)  # device d gets the sum of row d
        expected = x.sum(0)
    out = pmap_impl(lambda v: lax.psum_scatter(v, "i", tiled=tiled), axis_name="i")(x)
    check(out, expected, n)


def _np_all_to_all(x, split, concat):
    # Device d receives chunk d of every device s, stacked at `concat`.
    n = x.shape[0]
    return np.stack([np.stack([np.take(x[s], d, axis=split) for s in range(n)], axis=concat)
                     for d in range(n)])


@pytest.mark.parametrize("split,concat", [(0, 0), (0, 1), (1, 0)],
                         ids=["s0c0", "s0c1", "s1c0"])
def test_all_to_all(pmap_impl, split, concat):
    n = 4
    x = farange(n, n, n, 2)
    out = pmap_impl(lambda v: lax.all_to_all(v, "i", split, concat), axis_name="i")(x)
    check(out, _np_all_to_all(x, split, concat), n)


def test_axis_index_and_psum_of_one(pmap_impl):
    n = 8
    f = pmap_impl(lambda v: (lax.axis_index("i"), lax.psum(1, "i"), v + lax.axis_index("i")),
                  axis_name="i")
    x = np.zeros(n, np.int32)
    idx = np.arange(n, dtype=np.int32)
    check(f(x), (idx, np.full(n, n, np.int32), idx), n)


def test_psum_of_pytree_tuple(pmap_impl):
    n = 4
    a, b = farange(n, 2), np.arange(n * 3, dtype=np.int32).reshape(n, 3)
    f = pmap_impl(lambda p, q: lax.psum((p, {"b": q}), "i"), axis_name="i")
    expected = (np.broadcast_to(a.sum(0), a.shape), {"b": np.broadcast_to(b.sum(0, dtype=np.int32), b.shape)})
    check(f(a, b), expected, n)


# ------------------------------------------------------------------ pytrees --

def test_nested_pytree_in_and_out(pmap_impl):
    n = 2
    x, y = farange(n, 3), np.arange(n * 3, dtype=np.int32).reshape(n, 3)
    z = farange(n, start=1)

    def fn(tup, d):
        a, (b, c) = tup
        return {"t": (a + 1, [b * 2]), "l": [c - d["k"], {"deep": (a * c[..., None],)}]}

    out = pmap_impl(fn)((x, [y, z]), {"k": z})
    expected = {"t": (x + 1, [y * 2]), "l": [z - z, {"deep": (x * z[:, None],)}]}
    check(out, expected, n)


def test_none_leaves_pass_through(pmap_impl):
    n = 4
    x, y = farange(n, 2), farange(n, start=3)
    f = pmap_impl(lambda t: {"a": t["a"] * 2, "b": None, "c": (None, t["c"][1] + 1)})
    out = f({"a": x, "b": None, "c": (None, y)})
    check(out, {"a": x * 2, "b": None, "c": (None, y + 1)}, n)


Pair = collections.namedtuple("Pair", ["first", "second"])


def test_namedtuple_pytree(pmap_impl):
    n = 2
    x, y = farange(n, 3), farange(n, 3, start=10)
    out = pmap_impl(lambda p: Pair(p.second - p.first, p.first * 3))(Pair(x, y))
    assert type(out) is Pair
    check(out, Pair(y - x, x * 3), n)


# ------------------------------------------------------------------- dtypes --

_DTYPES = [np.float32, np.float16, jnp.bfloat16, np.int32, np.uint8, np.bool_, np.complex64]


@pytest.mark.parametrize("dtype", _DTYPES, ids=[np.dtype(d).name for d in _DTYPES])
def test_dtype_preserved_through_map_and_psum(pmap_impl, dtype):
    n = 4
    raw = np.arange(n * 3) % 5  # small values: exact even in 8-bit / half types
    if dtype is np.bool_:
        x = (raw % 2).astype(bool)
    elif dtype is np.complex64:
        x = (raw + 1j * raw[::-1]).astype(dtype)
    else:
        x = raw.astype(dtype)
    x = x.reshape(n, 3)
    # lax.psum promotes bool to int32; everything else keeps its dtype.
    sum_dtype = np.int32 if dtype is np.bool_ else dtype
    summed = x.astype(np.complex128 if dtype is np.complex64 else np.float64).sum(0)
    expected = (x + x, np.broadcast_to(summed.astype(sum_dtype), x.shape))
    out = pmap_impl(lambda v: (v + v, lax.psum(v, "i")), axis_name="i")(x)
    check(out, expected, n)


@pytest.mark.parametrize("dtype", [np.float64, np.int64], ids=["float64", "int64"])
def test_x64_dtypes(pmap_impl, x64, dtype):
    n = 4
    x = (np.arange(n * 3) + 2 ** 40).astype(dtype).reshape(n, 3)  # needs 64 bits
    out = pmap_impl(lambda v: (v * 3, lax.psum(v, "i")), axis_name="i")(x)
    check(out, (x * 3, np.broadcast_to(x.sum(0), x.shape)), n)


# ------------------------------------------------- scalars and numpy inputs --

def test_python_float_scalar_broadcast(pmap_impl):
    # A weakly typed Python float must not promote float32 data.
    x = farange(4, 3)
    f = pmap_impl(lambda v, s: v * s + s, in_axes=(0, None))
    check(f(x, 2.5), x * np.float32(2.5) + np.float32(2.5), 4)


def test_python_int_scalar_broadcast(pmap_impl):
    x = np.arange(8, dtype=np.int32).reshape(4, 2)
    f = pmap_impl(lambda s, v: v // s + s, in_axes=(None, 0))
    check(f(3, x), x // 3 + 3, 4)


@pytest.mark.parametrize("src,want", [(np.float32, np.float32), (np.float64, np.float32),
                                      (np.int64, np.int32)],
                         ids=["f32", "f64-to-f32", "i64-to-i32"])
def test_numpy_input_dtype_canonicalized(pmap_impl, src, want):
    # Without x64, 64-bit numpy inputs are canonicalized to 32 bits.
    x = np.arange(8, dtype=src).reshape(2, 4)
    out = pmap_impl(lambda v: v * 2)(x)
    check(out, (x * 2).astype(want), 2)


# ---------------------------------------------------- composition / reuse --

def test_output_fed_back_into_same_function(pmap_impl):
    f = pmap_impl(lambda v: v * 2 + lax.axis_index("i").astype(v.dtype), axis_name="i")
    x = farange(4, 2)
    idx = np.arange(4, dtype=np.float32)[:, None]
    expected = x
    for _ in range(3):
        expected = expected * 2 + idx
    check(f(f(f(x))), expected, 4)


def test_output_fed_into_another_pmapped_function(pmap_impl):
    f = pmap_impl(lambda v: jnp.exp(v / 10), axis_name="i")
    g = pmap_impl(lambda v, w: v / lax.psum(v, "j") + w, axis_name="j")
    x = farange(8, 2)
    y = f(x)
    e = np.exp(x / 10)
    check(g(y, y), e / e.sum(0) + e, 8)


def test_output_on_other_devices_fed_to_default_placement(pmap_impl):
    # The second pmap must move data off devices 7..4 onto devices 0..3.
    f = pmap_impl(lambda v: v + 1, devices=jax.devices()[::-1][:4])
    g = pmap_impl(lambda v: v * 3)
    x = farange(4, 2)
    out = g(f(x))
    check(out, (x + 1) * 3, 4)
    check_placement(out, devs(4))


def test_multiple_scalar_outputs_per_device(pmap_impl):
    x = (farange(4, 5) * 7 % 9).astype(np.float32)
    f = pmap_impl(lambda v: (v.sum(), v.max(), jnp.argmax(v).astype(jnp.int32)))
    expected = (x.sum(1), x.max(1), x.argmax(1).astype(np.int32))
    check(f(x), expected, 4)


def test_closure_over_constants(pmap_impl):
    w = farange(3, 3, start=1) / 10
    b = jnp.asarray(farange(3, start=-1))
    f = pmap_impl(lambda v: v @ w + b)
    x = farange(2, 3)
    check(f(x), x @ w + np.asarray(b), 2)


def test_integer_floor_div_mod_and_truncating_div(pmap_impl):
    x = (np.arange(16, dtype=np.int32) - 8).reshape(8, 2)
    f = pmap_impl(lambda v: (v // 3, v % 3, lax.div(v, np.int32(3))))
    trunc = (np.sign(x) * (np.abs(x) // 3)).astype(np.int32)
    check(f(x), (x // 3, x % 3, trunc), 8)


def test_comparisons_give_bool_outputs(pmap_impl):
    x = (farange(4, 3) * 5 % 7 - 3).astype(np.float32)
    f = pmap_impl(lambda v: (v > 0, v == lax.pmax(v, "i"), jnp.logical_not(v < 0)),
                  axis_name="i")
    check(f(x), (x > 0, x == x.max(0), ~(x < 0)), 4)


# ------------------------------------------- cross-checks against jax.pmap --

def test_cross_pmean_and_out_axes_none(pmap_impl):
    def fn(v):
        return v - lax.pmean(v, "i"), lax.psum(v, "i")

    x = farange(8, 3)
    kw = dict(axis_name="i", out_axes=(0, None))
    cross_check(pmap_impl(fn, **kw)(x), jax.pmap(fn, **kw)(x))


def test_cross_in_axes_one_out_axes_one(pmap_impl):
    def fn(a, b):
        return a * 2 + b

    x, y = farange(3, 4), farange(4, 3)
    kw = dict(in_axes=(1, 0), out_axes=1)
    cross_check(pmap_impl(fn, **kw)(x, y), jax.pmap(fn, **kw)(x, y))


def test_cross_reversed_devices_pytree(pmap_impl):
    def fn(t):
        return {"s": lax.psum(t["a"], "i"), "g": lax.all_gather(t["b"], "i")}

    t = {"a": farange(4, 2), "b": np.arange(4, dtype=np.int32)}
    kw = dict(axis_name="i", devices=jax.devices()[::-1][:4])
    cross_check(pmap_impl(fn, **kw)(t), jax.pmap(fn, **kw)(t))


# ------------------------------------------------------------- error parity --

def test_error_static_argnum_beyond_passed_args(pmap_impl):
    f = pmap_impl(lambda v, k=1: v * k, static_broadcasted_argnums=1)
    with pytest.raises(ValueError, match="static_broadcasted_argnums"):
        f(farange(2))


@pytest.mark.parametrize("in_axes,args", [
    ((0, 0, 0), (farange(2), farange(2))),
    (({"a": 0, "c": 0},), ({"a": farange(2), "b": farange(2)},)),
], ids=["tuple-too-long", "dict-keys-differ"])
def test_error_in_axes_not_a_prefix(pmap_impl, in_axes, args):
    with pytest.raises(ValueError, match="in_axes"):
        pmap_impl(lambda *a: a, in_axes=in_axes)(*args)


def test_error_float_in_axes_leaf(pmap_impl):
    with pytest.raises(TypeError, match="in_axes"):
        pmap_impl(lambda v: v, in_axes=(0.0,))(farange(2))


def test_error_float_out_axes_leaf(pmap_impl):
    with pytest.raises(TypeError, match="out_axes"):
        pmap_impl(lambda v: v, out_axes=1.0)(farange(2))


def test_error_empty_devices(pmap_impl):
    with pytest.raises(ValueError, match="devices"):
        pmap_impl(lambda v: v, devices=[])(farange(2))


def test_error_unhashable_static_arg(pmap_impl):
    f = pmap_impl(lambda v, k: v, static_broadcasted_argnums=1)
    with pytest.raises(ValueError, match="Non-hashable static arguments"):
        f(farange(2), [1, 2])


def test_error_mapped_size_exceeds_device_count(pmap_impl):
    with pytest.raises(ValueError):
        pmap_impl(lambda v: v)(farange(len(jax.devices()) + 1))


def test_error_no_mapped_argument(pmap_impl):
    with pytest.raises(ValueError, match="at least one"):
        pmap_impl(lambda v: v, in_axes=None)(farange(2))


def test_error_inconsistent_mapped_sizes(pmap_impl):
    with pytest.raises(ValueError):
        pmap_impl(lambda a, b: a + b)(farange(4), farange(2))


def test_error_axis_size_mismatch(pmap_impl):
    with pytest.raises(ValueError, match="axis_size"):
        pmap_impl(lambda v: v, axis_size=2)(farange(4))


def test_error_mapped_size_differs_from_devices(pmap_impl):
    with pytest.raises(ValueError):
        pmap_impl(lambda v: v, devices=jax.devices()[:2])(farange(4))


def test_error_unbound_axis_name(pmap_impl):
    with pytest.raises(NameError, match="unbound axis name"):
        pmap_impl(lambda v: lax.psum(v, "j"), axis_name="i")(farange(2))
