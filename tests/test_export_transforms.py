"""Calling exported functions under transformations, with polymorphic
shapes, and from inside other exports (argument errors:
test_export_call_errors.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

from pmapkit import export as pe

from _export_helpers import assert_tree_close, sds, values


def _loss_fn(x, w):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


def _fresh_and_loaded(fun, *specs, vjp_order=1):
    exported = pe.export(fun)(*specs)
    return exported, pe.deserialize(pe.serialize(exported, vjp_order=vjp_order))


@pytest.mark.parametrize("which", ["fresh", "loaded"])
def test_grad_through_exported_vjp(which):
    exported, loaded = _fresh_and_loaded(_loss_fn, sds((4, 3)), sds((3, 2)))
    exp = exported if which == "fresh" else loaded
    x, w = values((4, 3)), values((3, 2), seed=1)
    got = jax.grad(lambda x, w: exp.call(x, w), argnums=(0, 1))(x, w)
    want = jax.grad(_loss_fn, argnums=(0, 1))(x, w)
    assert_tree_close(got, want, tol=1e-5)
    # The same through jax.export's own call.
    jexp = jax_export.deserialize(pe.to_jax(exported).serialize(vjp_order=1))
    theirs = jax.grad(lambda x, w: jexp.call(x, w), argnums=(0, 1))(x, w)
    assert_tree_close(got, theirs, tol=1e-6)


def test_second_order_grad_needs_vjp_order_2():
    f = lambda x: jnp.sum(jnp.sin(x) * x)  # noqa: E731
    exported = pe.export(f)(sds((3,)))
    x = values((3,))
    want = jax.grad(lambda x: jnp.sum(jax.grad(f)(x)))(x)
    two = pe.deserialize(pe.serialize(exported, vjp_order=2))
    got = jax.grad(lambda x: jnp.sum(jax.grad(two.call)(x)))(x)
    assert_tree_close(got, want, tol=1e-5)
    one = pe.deserialize(pe.serialize(exported, vjp_order=1))
    with pytest.raises(ValueError, match="has no VJP"):
        jax.grad(lambda x: jnp.sum(jax.grad(one.call)(x)))(x)


def test_grad_without_vjp_is_a_clear_error():
    _, loaded = _fresh_and_loaded(_loss_fn, sds((4, 3)), sds((3, 2)), vjp_order=0)
    with pytest.raises(ValueError, match="vjp_order >= 1"):
        jax.grad(loaded.call)(values((4, 3)), values((3, 2)))


def test_grad_with_integer_inputs_and_outputs():
    def f(x, i):
        return x * i.astype(jnp.float32), i + 1

    _, loaded = _fresh_and_loaded(f, sds((3,)), sds((3,), jnp.int32))
    i = np.arange(3, dtype=np.int32)
    got = jax.grad(lambda x: jnp.sum(loaded.call(x, i)[0]))(values((3,)))
    assert_tree_close(got, i.astype(np.float32))


def test_call_inside_jit():
    _, loaded = _fresh_and_loaded(_loss_fn, sds((4, 3)), sds((3, 2)))
    x, w = values((4, 3)), values((3, 2), seed=1)
    got = jax.jit(lambda x, w: loaded.call(x, w) * 2)(x, w)
    assert_tree_close(got, 2 * _loss_fn(x, w), tol=1e-5)
    text = jax.jit(loaded.call).lower(x, w).as_text()
    assert "call_exported" in text or "_loss_fn" in text


def test_vmap_over_call():
    f = lambda x, w: jnp.tanh(x @ w)  # noqa: E731
    _, loaded = _fresh_and_loaded(f, sds((4, 3)), sds((3, 2)))
    xs, w = values((5, 4, 3)), values((3, 2), seed=1)
    got = jax.vmap(loaded.call, in_axes=(0, None))(xs, w)
    assert_tree_close(got, jax.vmap(f, in_axes=(0, None))(xs, w), tol=1e-6)
    # batched on a non-leading axis and on both arguments
    ws = values((3, 2, 6), seed=2)
    got = jax.vmap(loaded.call, in_axes=(None, 2))(xs[0], ws)
    assert_tree_close(got, jax.vmap(f, in_axes=(None, 2))(xs[0], ws), tol=1e-6)


def test_vmap_of_polymorphic_export_and_grad_of_vmap():
    f = lambda x: jnp.sum(jnp.sin(x), axis=0)  # noqa: E731
    _, loaded = _fresh_and_loaded(f, pe.poly_spec((None, 3), jnp.float32, "b, 3"))
    xs = values((4, 7, 3))
    assert_tree_close(jax.vmap(loaded.call)(xs), jax.vmap(f)(xs), tol=1e-5)
    got = jax.grad(lambda xs: jnp.sum(jax.vmap(loaded.call)(xs)))(xs)
    assert_tree_close(got, np.cos(xs), tol=1e-5)
    got = jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(loaded.call(x)))))(xs)
    assert_tree_close(got, np.cos(xs), tol=1e-5)


@pytest.mark.parametrize("n", [1, 3, 8])
def test_polymorphic_leading_dimension(n):
    _, loaded = _fresh_and_loaded(lambda x: jnp.cumsum(x, axis=0),
                                  pe.poly_spec((None, 2), jnp.float32, "b, ..."))
    x = values((n, 2))
    assert_tree_close(loaded.call(x), np.cumsum(x, axis=0), tol=1e-5)
    assert loaded.module_uses_dim_vars


def test_polymorphic_expression_and_several_dim_vars():
    def f(x, y):
        return jnp.concatenate([x, x], axis=0) + y[:, :1], x.shape[0] * jnp.ones(x.shape[1])

    b_spec = pe.poly_spec((None, None), jnp.float32, "b, c")
    y_spec = pe.poly_spec((None, None), jnp.float32, "2*b, c")
    exported, loaded = _fresh_and_loaded(f, b_spec, y_spec)
    assert [str(d) for d in exported.out_avals[0].shape] == ["2*b", "c"]
    x, y = values((3, 5)), values((6, 5), seed=1)
    out = loaded.call(x, y)
    assert_tree_close(out, (np.concatenate([x, x]) + y[:, :1], np.full(5, 3, np.float32)))


def test_polymorphic_call_inside_polymorphic_export():
    inner = pe.export(lambda x: x * 2)(pe.poly_spec((None,), jnp.float32, "b"))
    outer = pe.export(lambda x: inner.call(x) + 1)(pe.poly_spec((None,), jnp.float32, "b"))
    loaded = pe.deserialize(pe.serialize(outer))
    assert_tree_close(loaded.call(values((7,))), values((7,)) * 2 + 1)


def test_nested_export():
    inner = pe.deserialize(pe.serialize(pe.export(jnp.tanh)(sds((3,))), vjp_order=1))

    def outer(x, y):
        return {"t": inner.call(x) * y}

    exported = pe.export(outer)(sds((3,)), sds((3,)))
    loaded = pe.deserialize(pe.serialize(exported, vjp_order=1))
    x, y = values((3,)), values((3,), seed=1)
    assert_tree_close(loaded.call(x, y), {"t": np.tanh(x) * y}, tol=1e-6)
    got = jax.grad(lambda x: jnp.sum(loaded.call(x, y)["t"]))(x)
    assert_tree_close(got, (1 - np.tanh(x) ** 2) * y, tol=1e-5)
