"""pmap over pytree nodes of every kind real programs pass: a dataclass
registered with jax.tree_util, a flax-struct-like dataclass (a static field
and a method returning a replaced copy), a NamedTuple, a class registered
with register_pytree_node_class, dicts with None leaves."""
import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

n = jax.local_device_count()
x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w", "b"], meta_fields=[])
@dataclasses.dataclass
class Params:
    w: Any
    b: Any


@jax.pmap
def affine(p):
    return Params(p.w * 2, p.b + 1)


out = affine(Params(x, x))
print("dataclass", type(out).__name__, out.w[1].tolist(), out.b[1].tolist())


def _flatten(state):
    return (state.step, state.params), (state.apply_fn,)


def _unflatten(aux, children):
    return TrainStateLike(children[0], aux[0], children[1])


@dataclasses.dataclass(frozen=True)
class TrainStateLike:   # flax.struct.dataclass's shape: apply_fn is a static field
    step: Any
    apply_fn: Callable = dataclasses.field(metadata={"pytree_node": False})
    params: Any = None

    def apply_gradients(self, grads):
        return dataclasses.replace(self, step=self.step + 1,
                                   params=jax.tree.map(lambda p, g: p - 0.1 * g,
                                                       self.params, grads))


jax.tree_util.register_pytree_node(TrainStateLike, _flatten, _unflatten)


def loss(params, batch):
    return jnp.mean((batch * params["w"] + params["b"]) ** 2)


@functools.partial(jax.pmap, axis_name="batch")
def train_step(state, batch):
    grads = jax.grad(loss)(state.params, batch)
    grads = lax.pmean(grads, axis_name="batch")
    return state.apply_gradients(grads)


state = TrainStateLike(step=np.zeros((n,), np.int32), apply_fn=loss,
                       params={"w": np.ones((n,), np.float32), "b": np.zeros((n,), np.float32)})
for _ in range(3):
    state = train_step(state, x)
print("train state", state.step.tolist(), np.round(np.asarray(state.params["w"]), 4).tolist(),
      state.apply_fn is loss)


class Batch(NamedTuple):
    inputs: Any
    labels: Any


print("namedtuple", jax.pmap(lambda b: Batch(b.inputs.sum(), b.labels * 2))(
    Batch(x, x[:, 0]))._asdict()["inputs"].tolist())


@jax.tree_util.register_pytree_node_class
class Pair:
    def __init__(self, left, right):
        self.left, self.right = left, right

    def tree_flatten(self):
        return (self.left, self.right), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


swapped = jax.pmap(lambda p: Pair(p.right, p.left + lax.axis_index("i")), axis_name="i")(
    Pair(x, x[:, :1]))
print("registered class", swapped.left[:, 0].tolist(), swapped.right[:, 0].tolist())

mixed = jax.pmap(lambda d: {"sum": d["a"] + d["b"][0], "none": d["none"], "list": [d["b"][1]]})(
    {"a": x, "b": [x, x * 3], "none": None})
print("none leaves", mixed["none"], mixed["sum"][2].tolist(), mixed["list"][0][2].tolist())
