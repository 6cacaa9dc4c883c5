"""Programs naming a pmap's axis with hashables that are not strings, as
classic code did: each case takes a ``pmap`` (``jax.pmap`` of jax 0.4.30, or
``pmapkit.pmap``) and returns plain lists. ``golden/axis_names_classic.py``
records jax 0.4.30's answers (``golden/axis_names_jax_0.4.30.json``);
``test_pmap_axis_names.py`` holds pmapkit's to them.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P


class Name:
    """A user's axis name: equal (and hashing equal) by its key only, so two
    objects name one axis."""

    def __init__(self, key):
        self.key = key

    def __hash__(self):
        return hash(("Name", self.key))

    def __eq__(self, other):
        return isinstance(other, Name) and other.key == self.key

    def __repr__(self):
        return f"Name({self.key!r})"


X = np.arange(8.0, dtype=np.float32)
X2 = np.arange(8.0, dtype=np.float32).reshape(2, 4)


def _tolist(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a).tolist(), tree)


def in_axes_given_positionally(pmap):
    # pmap(f, (0, 0)): the tuple lands in axis_name (a 2024 sampler does it).
    return pmap(lambda a, b: a * b + 1.0, (0, 0))(X, X)


def tuple_name_with_collectives(pmap):
    name = ("batch", 1)
    return pmap(lambda a: jax.lax.psum(a, [name]) * a, name)(X)


def object_name_collectives(pmap):
    # Two equal objects: the pmap's and the collectives' are one axis.
    perm = [(i, (i + 1) % 8) for i in range(8)]

    def body(a):
        n = Name("i")
        return (jax.lax.psum(a, n), jax.lax.pmean(a, n), jax.lax.pmax(a, n),
                jax.lax.pmin(a, n), jax.lax.axis_index(n),
                jax.lax.all_gather(a, n), jax.lax.ppermute(a, n, perm),
                jax.lax.psum_scatter(jnp.arange(8.0) * a, n, tiled=True),
                jax.lax.all_to_all(jnp.arange(8.0) + a, n, 0, 0, tiled=True))
    return pmap(body, Name("i"))(X)


def other_hashables(pmap):
    out = {}
    for key, name in [("frozenset", frozenset({"a", "b"})), ("float", 2.5),
                      ("none_in_tuple", ("a", None))]:
        wrapped = [name] if isinstance(name, tuple) else name
        out[key] = pmap(lambda a: jax.lax.psum(a, wrapped) * a, name)(X)
    out["int_axis_index"] = pmap(lambda a: a + jax.lax.axis_index(3), 3)(X)
    return out


def nested(pmap):
    outer, inner = Name("outer"), frozenset({"inner"})

    def body(a):
        return (jax.lax.psum(a, outer) + 10 * jax.lax.psum(a, inner)
                + 100 * jax.lax.axis_index(outer))
    return pmap(pmap(body, inner), outer)(X2)


def jit_and_scan_in_body(pmap):
    n = Name("j")

    @jax.jit
    def inner(a):
        return jax.lax.psum(a, n) * 2

    def body(a):
        def step(c, _):
            return c + jax.lax.pmean(c, n), jax.lax.axis_index(n)
        c, idx = jax.lax.scan(step, a, None, length=3)
        return inner(c), idx
    return pmap(body, n)(X)


def grad_of_pmap(pmap):
    n = Name("g")
    f = pmap(lambda a: jnp.sin(a) * jax.lax.psum(a * a, n), n)
    return jax.grad(lambda x: f(x).sum())(X)


def pmap_of_grad_with_pmean(pmap):
    n = Name("dp")

    def step(w, x):
        g = jax.grad(lambda w: jnp.sum((w * x - 1.0) ** 2))(w)
        return w - 0.1 * jax.lax.pmean(g, n)
    w = np.ones((8, 3), np.float32)
    x = np.arange(24.0, dtype=np.float32).reshape(8, 3) / 24
    return pmap(step, n)(w, x)


def vmap_of_pmap(pmap):
    n = Name("v")
    f = pmap(lambda a: a * jax.lax.psum(a, n), n)
    return jax.vmap(f, in_axes=1, out_axes=1)(np.arange(16.0, dtype=np.float32).reshape(8, 2))


def jit_of_pmap(pmap):
    n = Name("jit")
    f = jax.jit(pmap(lambda a: jax.lax.psum(a, n) - a, n))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(X)


def custom_vjp_with_collective(pmap):
    n = Name("cv")

    @jax.custom_vjp
    def scaled(a):
        return a * 3.0

    def fwd(a):
        return scaled(a), a

    def bwd(a, ct):
        return (jax.lax.psum(ct, n) * a,)

    scaled.defvjp(fwd, bwd)
    f = pmap(jax.grad(lambda a: scaled(a).sum()), n)
    return f(X)


def static_and_out_axes(pmap):
    n = Name("s")
    f = pmap(lambda a, k: jax.lax.psum(a, n) * k, n, static_broadcasted_argnums=1,
             out_axes=0)
    return f(X, 3.0)


def unhashable(pmap):
    try:
        pmap(lambda a: a, ["not", "hashable"])(X)
    except TypeError:
        return "TypeError"
    return "no error"


CASES = [in_axes_given_positionally, tuple_name_with_collectives,
         object_name_collectives, other_hashables, nested, jit_and_scan_in_body,
         grad_of_pmap, pmap_of_grad_with_pmean, vmap_of_pmap, jit_of_pmap,
         custom_vjp_with_collective, static_and_out_axes, unhashable]


def run_all(pmap):
    return {case.__name__: _tolist(case(pmap)) for case in CASES}


# -- pjit: meshes and PartitionSpecs naming axes with hashables ----------------
Y = np.arange(32.0, dtype=np.float32).reshape(8, 4)


def pjit_one_axis(pjit, Mesh, wsc, devices):
    name = Name("rows")
    f = pjit(lambda a: wsc(jnp.sin(a) * 2, P(name)) + a.sum(),
             in_shardings=P(name), out_shardings=P(name))
    with Mesh(np.array(devices), (name,)):
        out = f(Y)
    return {"value": out, "shard_shape": list(out.sharding.shard_shape(out.shape))}


def pjit_two_axes(pjit, Mesh, wsc, devices):
    a, b = Name("a"), 7.5
    mesh = Mesh(np.array(devices).reshape(2, 4), (a, b))
    out = {}
    for label, spec in (("grouped", P((a, b))), ("per dim", P(a, b)), ("second", P(None, b))):
        f = pjit(lambda v: v * 3 - 1, in_shardings=spec, out_shardings=spec)
        with mesh:
            r = f(Y)
        out[label] = {"value": r, "shard_shape": list(r.sharding.shard_shape(r.shape))}
    return out


def pjit_undefined_axis(pjit, Mesh, wsc, devices):
    f = pjit(lambda v: v, in_shardings=P(Name("elsewhere")))
    try:
        with Mesh(np.array(devices), (Name("rows"),)):
            f(Y)
    except ValueError as exc:
        return "Resource axis: Name('elsewhere') of" in str(exc)
    return "no error"


PJIT_CASES = [pjit_one_axis, pjit_two_axes, pjit_undefined_axis]


def run_pjit_cases(pjit, Mesh, wsc, devices):
    return {case.__name__: _tolist(case(pjit, Mesh, wsc, devices)) for case in PJIT_CASES}
