"""``f.lower(...)`` / ``.compile()`` are real ``jax.stages`` objects, and
``f._debug_cache_keys()`` is the classic readable description.

Parity: the same body goes through ``jax.pmap(...).lower`` (pmap) or
``jax.jit(..., in_shardings=NamedSharding...)`` (pjit) and through pmapkit;
types, trees, avals, donated flags, shardings, analyses and the TypeErrors of
a mismatched call are compared. Output *specs* of pmap are compared by
devices and shape only here (the spec spelling is another item's parity).
"""
import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit.core.rules.primitives import pjit_p, pmap_p

N = 8


def farange(*shape, dtype=np.float32, start=0):
    return (np.arange(np.prod(shape)) + start).reshape(shape).astype(dtype)


def collective_checks():
    """Bodies with collectives run with JAX's checks on (the suite's
    setting); that needs our primitives' typecheck rule, asserted here."""
    from pmapkit import _jax_private as jp

    assert pmap_p in jp.custom_typechecks
    return contextlib.nullcontext()


def pjit_mesh():
    return pmapkit.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))


def jax_mesh_of(mesh):
    return getattr(mesh, "jax_mesh", mesh)


def both_pmaps(fun, **kwargs):
    return pmapkit.pmap(fun, **kwargs), jax.pmap(fun, **kwargs)


def both_pjits(fun, in_specs, out_specs, mesh, **kwargs):
    jm = jax_mesh_of(mesh)
    to_ns = lambda tree: jax.tree_util.tree_map(
        lambda s: NamedSharding(jm, P() if s is None else s), tree,
        is_leaf=lambda s: s is None or isinstance(s, P))
    ours = pmapkit.pjit(fun, in_specs, out_specs, **kwargs)
    theirs = jax.jit(fun, in_shardings=to_ns(in_specs),
                     out_shardings=to_ns(out_specs), **kwargs)
    return ours, theirs


def error_of(fn, *args, **kwargs):
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


def same_devices(a, b):
    return set(a.device_set) == set(b.device_set)


def plain_avals(tree):
    """JAX's in_avals as classic Lowered.in_avals gave them: no sharding."""
    return jax.tree_util.tree_map(
        lambda a: jax.core.ShapedArray(a.shape, a.dtype, weak_type=a.weak_type), tree)


def without_classic_lines(text):
    """An AOT argument-type error without the lines earlier releases raised
    (after JAX's own message): classic pjit's, and a pmap's mismatches as
    later jax.pmap releases named them."""
    text = text.split("\nComputation was compiled for different input types")[0]
    return text.split("\nArgument types differ (")[0]


def pytree_mismatch_like_jax_and_classic(mine, ref, compiled_tree, called_tree):
    """An AOT call with another argument pytree: JAX's own message (jax 0.10
    and >= 0.4.26 word it so), then the line jax <= 0.4.25 raised, which
    code and tests of those releases match."""
    assert type(mine) is type(ref) is TypeError
    jax_text, classic = str(mine).rsplit("\n", 1)
    assert jax_text == str(ref)
    assert "does not match the input pytree" in jax_text
    assert classic == f"function compiled for {compiled_tree}, called with {called_tree}"
    assert re.search("function compiled for .*, called with .*", str(mine))


# =============================================================== pmap ======

def _add(a, b):
    return {"s": a + b["x"], "d": a * 2}


def test_pmap_lower_and_compile_are_jax_stages_objects():
    ours, theirs = both_pmaps(lambda v: v * 2)
    x = farange(N, 2)
    lowered = ours.lower(x)
    assert isinstance(lowered, jax.stages.Lowered)
    assert isinstance(theirs.lower(x), jax.stages.Lowered)
    compiled = lowered.compile()
    assert isinstance(compiled, jax.stages.Compiled)


@pytest.mark.parametrize("case", ["leaf", "tree", "kwargs"])
def test_pmap_in_tree_and_in_avals_match_jax_pmap(case):
    x = farange(N, 2)
    if case == "leaf":
        fun, args, kwargs = (lambda a: a + 1), (x,), {}
    elif case == "tree":
        fun, args, kwargs = _add, (x, {"x": x}), {}
    else:
        fun, args, kwargs = (lambda a, k: a * k), (x,), {"k": x}
    ours, theirs = both_pmaps(fun)
    mine, ref = ours.lower(*args, **kwargs), theirs.lower(*args, **kwargs)
    assert mine.in_tree == ref.in_tree
    # Classic Lowered.in_avals: plain ShapedArrays (jax.pmap 0.10's carry
    # its mesh in their shardings, so they compare unequal to those).
    assert mine.in_avals == plain_avals(ref.in_avals)
    assert mine.in_avals == jax.tree_util.tree_map(
        lambda a: jax.core.ShapedArray(a.shape, a.dtype), (args, kwargs))
    assert jax.tree_util.tree_structure(mine.out_info) == \
        jax.tree_util.tree_structure(ref.out_info)


def test_pmap_args_info_donated_matches_jax_pmap():
    ours, theirs = both_pmaps(_add, donate_argnums=(0,))
    x = farange(N, 2)
    mine, ref = ours.lower(x, {"x": x}), theirs.lower(x, {"x": x})
    flags = lambda lo: [a.donated for a in jax.tree_util.tree_leaves(lo.args_info)]
    assert flags(mine) == flags(ref) == [True, False]
    assert mine.donate_argnums == ref.donate_argnums == (0,)
    shapes = lambda lo: [(a.shape, a.dtype) for a in jax.tree_util.tree_leaves(lo.args_info)]
    assert shapes(mine) == shapes(ref)


def test_pmap_out_info_matches_jax_pmap_and_the_call():
    ours, theirs = both_pmaps(_add)
    x = farange(N, 3)
    mine, ref = ours.lower(x, {"x": x}), theirs.lower(x, {"x": x})
    out = ours(x, {"x": x})
    for k in ("s", "d"):
        m, r = mine.out_info[k], ref.out_info[k]
        assert (m.shape, m.dtype) == (r.shape, r.dtype)
        assert same_devices(m.sharding, r.sharding)
        assert m.sharding == out[k].sharding


@pytest.mark.parametrize("dialect", [None, "stablehlo", "hlo"])
def test_pmap_as_text_and_compiler_ir_dialects(dialect):
    ours, theirs = both_pmaps(lambda v: jnp.sin(v))
    x = farange(N, 2)
    mine, ref = ours.lower(x), theirs.lower(x)
    text = mine.as_text(dialect=dialect)
    assert ("HloModule" in text) == (dialect == "hlo")
    assert "sine" in text
    assert type(mine.compiler_ir(dialect=dialect)) is type(ref.compiler_ir(dialect=dialect))


def test_pmap_unknown_dialect_raises_like_jax_pmap():
    ours, theirs = both_pmaps(lambda v: v)
    x = farange(N)
    mine = error_of(ours.lower(x).as_text, dialect="mhlo-ish")
    ref = error_of(theirs.lower(x).as_text, dialect="mhlo-ish")
    assert type(mine) is type(ref) is ValueError
    assert str(mine) == str(ref)


def test_pmap_lowered_and_compiled_cost_analysis():
    ours, theirs = both_pmaps(lambda v: jax.lax.psum(v * v, "i"), axis_name="i")
    x = farange(N, 4)
    with collective_checks():
        mine, ref = ours.lower(x), theirs.lower(x)
        lowered_cost = mine.cost_analysis()
        compiled = mine.compile()
        compiled_cost = compiled.cost_analysis()
        ref_compiled_cost = ref.compile().cost_analysis()
    assert isinstance(lowered_cost, dict) and "flops" in lowered_cost
    assert isinstance(compiled_cost, dict)
    assert "flops" in compiled_cost and "flops" in ref_compiled_cost
    assert compiled_cost["flops"] > 0


def test_pmap_compiled_memory_analysis_and_runtime_executable():
    ours, theirs = both_pmaps(lambda v: v + 1)
    x = farange(N, 4)
    mine, ref = ours.lower(x).compile(), theirs.lower(x).compile()
    stats = mine.memory_analysis()
    assert type(stats) is type(ref.memory_analysis())
    assert stats.argument_size_in_bytes == ref.memory_analysis().argument_size_in_bytes
    assert type(mine.runtime_executable()) is type(ref.runtime_executable())
    assert "HloModule" in mine.as_text()


def test_pmap_compiled_shardings_match_the_call_and_jax_pmap_devices():
    ours, theirs = both_pmaps(_add)
    x = farange(N, 2)
    mine = ours.lower(x, {"x": x}).compile()
    ref = theirs.lower(x, {"x": x}).compile()
    out = ours(x, {"x": x})
    assert jax.tree_util.tree_structure(mine.input_shardings) == \
        jax.tree_util.tree_structure(ref.input_shardings)
    for m, r in zip(jax.tree_util.tree_leaves(mine.input_shardings),
                    jax.tree_util.tree_leaves(ref.input_shardings)):
        assert same_devices(m, r)
    assert mine.output_shardings["s"] == out["s"].sharding
    assert same_devices(mine.output_shardings["d"], ref.output_shardings["d"])
    assert mine.in_avals == plain_avals(ref.in_avals)   # as the Lowered's


def test_pmap_compiled_call_equals_calling_f_and_jax_pmap():
    body = lambda a, b: {"s": a + b["x"], "p": jax.lax.psum(a, "i")}
    ours, theirs = both_pmaps(body, axis_name="i")
    x, y = farange(N, 3), farange(N, 3, start=5)
    with collective_checks():
        compiled = ours.lower(x, {"x": y}).compile()
        got = compiled(x, {"x": y})
        direct = ours(x, {"x": y})
        ref = theirs(x, {"x": y})
    for k in ("s", "p"):
        assert isinstance(got[k], jax.Array)
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(direct[k]))
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(ref[k]))
        assert got[k].sharding == direct[k].sharding


def test_pmap_compiled_takes_numpy_and_otherwise_placed_inputs():
    f = pmapkit.pmap(lambda v: v * 3)
    x = farange(N, 2)
    compiled = f.lower(x).compile()
    on_one_device = jax.device_put(x, jax.devices()[0])
    for arg in (x, on_one_device, f(x)):
        np.testing.assert_array_equal(np.asarray(compiled(arg)),
                                      np.asarray(jnp.asarray(arg)) * 3)


def test_pmap_compiled_wrong_dtype_raises_jax_message():
    ours, theirs = both_pmaps(lambda a: a + 1)
    x = farange(N, 2)
    bad = x.astype(np.int32)
    mine = error_of(ours.lower(x).compile(), bad)
    ref = error_of(theirs.lower(x).compile(), bad)
    assert type(mine) is type(ref) is TypeError
    # Same message, except that pmapkit names the argument as the user did,
    # then classic pjit's lines.
    assert without_classic_lines(str(mine)) == str(ref).replace("'flat_args[0]'", "'a'")
    assert "Argument 'a' compiled with float32[8,2] and called with int32[8,2]" in str(mine)
    # Then the same mismatch as jax.pmap of JAX 0.10 names it (its own
    # message's lines) and as the C++ pmap of 0.7.2 did: the regexes of both
    # releases' pmap_test testLowerCompileArgTypeMismatch match.
    assert str(ref).split("mismatches are:\n")[1] in str(mine)
    for name in (r"'flat_args\[0\]'", "''"):
        assert re.search(r"Argument types differ .*The mismatches are:\n"
                         rf"Argument {name} compiled with.*float32.*and called with.*int32.*",
                         str(mine)), str(mine)


def test_pmap_compiled_lists_every_mismatch_by_name():
    f = pmapkit.pmap(_add)
    x = farange(N, 2)
    compiled = f.lower(x, {"x": x}).compile()
    err = error_of(compiled, farange(N, 3), {"x": farange(N, 2, dtype=np.int32)})
    assert isinstance(err, TypeError)
    assert "Argument 'a' compiled with float32[8,2] and called with float32[8,3]" in str(err)
    assert ("Argument 'b['x']' compiled with float32[8,2] and called with "
            "int32[8,2]") in str(err)


@pytest.mark.parametrize("bad", ["key", "leaf_for_tree", "extra_arg"])
def test_pmap_compiled_wrong_pytree_raises_like_jax_pmap(bad):
    ours, theirs = both_pmaps(_add)
    x = farange(N, 2)
    args = {"key": (x, {"y": x}), "leaf_for_tree": (x, x),
            "extra_arg": (x, {"x": x}, x)}[bad]
    mine = error_of(ours.lower(x, {"x": x}).compile(), *args)
    ref = error_of(theirs.lower(x, {"x": x}).compile(), *args)
    pytree_mismatch_like_jax_and_classic(
        mine, ref, jax.tree_util.tree_structure(((x, {"x": x}), {})),
        jax.tree_util.tree_structure((args, {})))


def test_pmap_compile_with_compiler_options():
    ours, theirs = both_pmaps(lambda v: v - 1)
    x = farange(N, 2)
    options = {"xla_embed_ir_in_executable": True}
    compiled = ours.lower(x).compile(compiler_options=options)
    assert isinstance(compiled, jax.stages.Compiled)
    np.testing.assert_array_equal(np.asarray(compiled(x)), x - 1)
    mine = error_of(ours.lower(x).compile, compiler_options={"no_such_xla_option": 1})
    ref = error_of(theirs.lower(x).compile, compiler_options={"no_such_xla_option": 1})
    assert type(mine) is type(ref)


def test_pmap_static_broadcasted_args_are_left_out_like_jax_pmap():
    ours, theirs = both_pmaps(lambda a, k: a * k, static_broadcasted_argnums=1)
    x = farange(N, 2)
    mine, ref = ours.lower(x, 3), theirs.lower(x, 3)
    assert mine.in_tree == ref.in_tree
    compiled = mine.compile()
    np.testing.assert_array_equal(np.asarray(compiled(x)), x * 3)
    # pmapkit's earlier compiled objects took the static value too.
    np.testing.assert_array_equal(np.asarray(compiled(x, 3)), x * 3)
    assert isinstance(error_of(compiled, x, 4), TypeError)


def test_pmap_compiled_donates_like_calling_f():
    f = pmapkit.pmap(lambda v: v * 2, donate_argnums=0)
    x = f(farange(N, 2))  # a device array already in the program's sharding
    compiled = f.lower(x).compile()
    out = compiled(x)
    np.testing.assert_array_equal(np.asarray(out), farange(N, 2) * 4)
    assert x.is_deleted()


def test_pmap_compiled_refuses_tracers_like_jax():
    ours, theirs = both_pmaps(lambda v: v * 2)
    x = farange(N, 2)
    mine_c, ref_c = ours.lower(x).compile(), theirs.lower(x).compile()
    mine = error_of(jax.jit(lambda v: mine_c(v)), x)
    ref = error_of(jax.jit(lambda v: ref_c(v)), x)
    assert type(mine) is type(ref) is TypeError
    assert "Cannot apply JAX transformations" in str(mine)


def test_pmap_lowered_compiles_more_than_once():
    f = pmapkit.pmap(lambda v: v * 5 + 2)
    x = farange(N, 7)
    lowered = f.lower(x)
    first, second = lowered.compile(), lowered.compile()
    for compiled in (first, second):
        np.testing.assert_array_equal(np.asarray(compiled(x)), x * 5 + 2)
    assert f._cache_size == 0  # AOT compiles leave the call cache alone


# =============================================================== pjit ======

def test_pjit_lower_and_compile_are_jax_stages_objects():
    mesh = pjit_mesh()
    ours, _ = both_pjits(lambda a: a + 1, P("x"), P("x"), mesh)
    with mesh:
        lowered = ours.lower(farange(8, 8))
    assert isinstance(lowered, jax.stages.Lowered)
    assert isinstance(lowered.compile(), jax.stages.Compiled)


def test_pjit_lowered_matches_jax_jit():
    mesh = pjit_mesh()
    body = lambda a, b: (a @ b, {"t": a.T})
    ours, theirs = both_pjits(body, (P("x", "y"), P("x")), (P("x"), {"t": P("y")}),
                              mesh, donate_argnums=(1,))
    x, y = farange(8, 8), farange(8, 8, start=1)
    with mesh:
        mine = ours.lower(x, y)
    ref = theirs.lower(x, y)
    assert mine.in_tree == ref.in_tree
    assert mine.in_avals == plain_avals(ref.in_avals)
    assert mine.in_avals == ((jax.core.ShapedArray((8, 8), np.float32),) * 2, {})
    assert mine.args_info == ref.args_info
    assert mine.donate_argnums == ref.donate_argnums == (1,)
    assert jax.tree_util.tree_map(lambda s: (s.shape, s.dtype, s.sharding), mine.out_info) \
        == jax.tree_util.tree_map(lambda s: (s.shape, s.dtype, s.sharding), ref.out_info)
    assert set(mine.cost_analysis()) >= {"flops"}
    assert "flops" in ref.cost_analysis()


def test_pjit_compiled_shardings_equal_jax_jit():
    mesh = pjit_mesh()
    body = lambda a, b: (a + b, a * b)
    ours, theirs = both_pjits(body, (P("x"), P("y")), (P(("x", "y")), None), mesh)
    x, y = farange(8, 8), farange(8, 8, start=3)
    with mesh:
        lowered = ours.lower(x, y)
        mine = lowered.compile()
        out = ours(x, y)
    ref = theirs.lower(x, y).compile()
    assert mine.input_shardings == ref.input_shardings
    assert mine.output_shardings == ref.output_shardings
    assert mine.output_shardings[0] == out[0].sharding
    # Lowered and Compiled agree (as jax.jit's do), as classic plain avals.
    assert mine.in_avals == lowered.in_avals == plain_avals(ref.in_avals)
    got = mine(x, y)
    for g, r in zip(got, ref(x, y)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
        assert g.sharding == r.sharding


def test_pjit_compiled_analyses():
    mesh = pjit_mesh()
    ours, theirs = both_pjits(lambda a: jnp.sum(a * a, axis=0), P("x"), None, mesh)
    x = farange(8, 8)
    with mesh:
        mine = ours.lower(x).compile()
    ref = theirs.lower(x).compile()
    assert set(ref.cost_analysis()) <= set(mine.cost_analysis()) | set(ref.cost_analysis())
    assert "flops" in mine.cost_analysis()
    assert type(mine.memory_analysis()) is type(ref.memory_analysis())
    assert type(mine.runtime_executable()) is type(ref.runtime_executable())
    assert "HloModule" in mine.as_text()


def test_pjit_compiled_wrong_avals_message_equals_jax_jit():
    mesh = pjit_mesh()
    ours, theirs = both_pjits(lambda a, b: a + b, (P("x"), None), P("x"), mesh)
    x = farange(8, 8)
    with mesh:
        mine_c = ours.lower(x, x).compile()
    ref_c = theirs.lower(x, x).compile()
    bad = (x.astype(np.int32), farange(8, 4))
    mine, ref = error_of(mine_c, *bad), error_of(ref_c, *bad)
    assert type(mine) is type(ref) is TypeError
    assert without_classic_lines(str(mine)) == str(ref)
    assert ("Computation was compiled for different input types and called with "
            "different types. One of the mismatches is:\nCompiled with:\n  "
            "float32[8,8]\ncalled with:\n  int32[8,8]") in str(mine)
    assert "Argument 'b' compiled with float32[8,8] and called with float32[8,4]" in str(mine)


@pytest.mark.parametrize("bad", ["tuple_for_leaf", "missing_arg", "kwarg"])
def test_pjit_compiled_wrong_pytree_message_equals_jax_jit(bad):
    mesh = pjit_mesh()
    ours, theirs = both_pjits(lambda a, b: a - b, None, None, mesh)
    x = farange(8, 8)
    with mesh:
        mine_c = ours.lower(x, x).compile()
    ref_c = theirs.lower(x, x).compile()
    args, kwargs = {"tuple_for_leaf": (((x, x), x), {}),
                    "missing_arg": ((x,), {}),
                    "kwarg": ((x,), {"b": x})}[bad]
    mine, ref = error_of(mine_c, *args, **kwargs), error_of(ref_c, *args, **kwargs)
    if bad == "kwarg":
        # A pjit with in_axis_resources takes no keywords: JAX's TypeError
        # text, then classic pjit's NotImplementedError line (both types).
        assert isinstance(mine, TypeError) and isinstance(mine, NotImplementedError)
        jax_text, classic = str(mine).rsplit("\n", 1)
        assert jax_text == str(ref)
        assert classic == ("function was compiled by a transformation that does not "
                           "support keyword arguments, but called with keyword "
                           "arguments: b")
        return
    pytree_mismatch_like_jax_and_classic(
        mine, ref, jax.tree_util.tree_structure(((x, x), {})),
        jax.tree_util.tree_structure((args, kwargs)))


def test_pjit_static_argnums_left_out_like_jax_jit():
    mesh = pjit_mesh()
    ours, theirs = both_pjits(lambda a, k: a * k, P("x"), P("x"), mesh,
                              static_argnums=1)
    x = farange(8, 8)
    with mesh:
        mine = ours.lower(x, 4)
    ref = theirs.lower(x, 4)
    assert mine.in_tree == ref.in_tree
    compiled = mine.compile()
    out = compiled(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref.compile()(x)))
    assert out.sharding == NamedSharding(jax_mesh_of(mesh), P("x"))


def test_pjit_as_text_shows_the_shardings():
    mesh = pjit_mesh()
    ours, _ = both_pjits(lambda a: a * 2, P("x", "y"), P("y"), mesh)
    with mesh:
        lowered = ours.lower(farange(8, 8))
    assert "sharding" in lowered.as_text()
    assert "HloModule" in lowered.as_text(dialect="hlo")
    assert lowered.compiler_ir(dialect="hlo") is not None


# ====================================================== _debug_cache_keys ==

def test_debug_cache_keys_empty_and_header():
    f = pmapkit.pmap(lambda v: v + 1)
    assert f._debug_cache_keys() == "The cache contains 0 elements:"
    f(farange(N, 2))
    text = f._debug_cache_keys()
    assert text.startswith("The cache contains 1 elements:\n\n")


def test_debug_cache_keys_explain_a_dtype_and_shape_miss():
    f = pmapkit.pmap(lambda v: v * 2)
    f(farange(N, 2))
    f(farange(N, 2, dtype=np.int32))
    f(farange(N, 3))
    text = f._debug_cache_keys()
    assert text.startswith("The cache contains 3 elements:")
    elements = text.split("\n\n")[1:]
    assert len(elements) == 3
    sigs = [re.search(r"dynamic arg signatures \(positional \+ keyword\): (.*)", e).group(1)
            for e in elements]
    assert sorted(sigs) == ["float32[8,2]", "float32[8,3]", "int32[8,2]"]
    assert all("state: compiled (fast path)" in e for e in elements)


def test_debug_cache_keys_static_args_and_treedefs():
    f = pmapkit.pmap(lambda a, k, t: a * k + t[0] - t[1],
                     static_broadcasted_argnums=1)
    x = farange(N, 2)
    f(x, 3, (x, x))
    f(x, 4.0, (x, x))
    text = f._debug_cache_keys()
    assert "static args (positional): 1=3 (int)" in text
    assert "static args (positional): 1=4.0 (float)" in text
    assert "PyTreeDef((*, *))" in text


def test_debug_cache_keys_keyword_names_and_no_collision_with_a_dict():
    def body(a, b=None, k=None):
        if k is None:
            return a[0] * 2 + b["k"]
        return a * 10 + k

    f = pmapkit.pmap(body)
    x = farange(N)
    positional = f((x,), {"k": x})
    keyword = f(x, k=x)  # same flat treedef as the call above: must not share it
    np.testing.assert_array_equal(np.asarray(positional), x * 3)
    np.testing.assert_array_equal(np.asarray(keyword), x * 11)
    text = f._debug_cache_keys()
    assert "The cache contains 2 elements:" in text
    assert "dynamic arg keyword names: k" in text


def test_debug_cache_keys_leaf_kinds():
    f = pmapkit.pmap(lambda a, b: a + b, in_axes=(0, None))
    x = farange(N, 2)
    f(x, 1.0)                       # Python scalar
    f(x, np.float32(2.0))           # numpy scalar
    f(x, np.ones(2, np.float64))    # numpy array canonicalized per call
    f(jnp.asarray(x), jnp.float32(1) + 1.0)
    text = f._debug_cache_keys()
    assert "Python float scalar" in text
    assert "numpy float32 scalar" in text
    assert "numpy.ndarray float64[2]" in text
    assert "float32[8,2]" in text


def test_debug_cache_keys_shardings_and_pruned_inputs():
    f = pmapkit.pmap(lambda a, unused: a + 1)
    x = farange(N, 2)
    f(x, x)
    text = f._debug_cache_keys()
    assert "dynamic arg shardings (compiled for" in text
    assert "NamedSharding" in text
    assert "unused (pruned from the program)" in text


def test_debug_cache_keys_trace_context_explains_a_default_device_miss():
    mesh = pjit_mesh()
    f = pmapkit.pjit(lambda a: a + 1, P("x"), P("x"))
    x = farange(8, 8)
    with mesh:
        f(x)
        with jax.default_device(jax.devices()[1]):
            f(x)
    text = f._debug_cache_keys()
    assert "The cache contains 2 elements:" in text
    assert "jax_default_device: None" in text
    assert f"jax_default_device: {jax.devices()[1]}" in text
    assert "jax_enable_x64: False" in text


def test_debug_cache_keys_failed_entry_says_why():
    g = pmapkit.pmap(lambda v: v.reshape(-1, 3))
    assert isinstance(error_of(g, farange(N, 2)), TypeError)
    text = g._debug_cache_keys()
    assert "The cache contains 1 elements:" in text
    assert "state: failed (TypeError" in text
    assert "not recorded (this entry runs on the Python path)" in text


def test_pmap_pruned_input_reads_like_jax_pmap():
    ours, theirs = both_pmaps(lambda a, unused: a + 1)
    x = farange(N, 2)
    lowered = ours.lower(x, x)
    mine, ref = lowered.compile(), theirs.lower(x, x).compile()
    assert mine.in_avals == lowered.in_avals == plain_avals(ref.in_avals)
    shardings = jax.tree_util.tree_leaves(mine.input_shardings, is_leaf=lambda s: s is None)
    ref_shardings = jax.tree_util.tree_leaves(ref.input_shardings, is_leaf=lambda s: s is None)
    assert [s is None for s in shardings] == [s is None for s in ref_shardings]
    np.testing.assert_array_equal(np.asarray(mine(x, x)), x + 1)


def test_pmap_compiled_with_keyword_arguments():
    ours, theirs = both_pmaps(lambda a, k: a * k)
    x, k = farange(N, 2), farange(N, 2, start=1)
    mine, ref = ours.lower(x, k=k).compile(), theirs.lower(x, k=k).compile()
    np.testing.assert_array_equal(np.asarray(mine(x, k=k)), np.asarray(ref(x, k=k)))
    pytree_mismatch_like_jax_and_classic(
        error_of(mine, x, k), error_of(ref, x, k),
        jax.tree_util.tree_structure(((x,), {"k": k})),
        jax.tree_util.tree_structure(((x, k), {})))


def test_pjit_debug_cache_keys_static_and_signatures():
    mesh = pjit_mesh()
    f = pmapkit.pjit(lambda a, k: a * k, P("x"), P("x"), static_argnums=1)
    x = farange(8, 8)
    with mesh:
        f(x, 2)
        f(x.astype(np.int32), 2)
    text = f._debug_cache_keys()
    assert text.startswith("The cache contains 2 elements:")
    assert text.count("static args (positional): 1=2 (int)") == 2
    assert "float32[8,8]" in text and "int32[8,8]" in text
    assert "spec=P('x',)" in text
