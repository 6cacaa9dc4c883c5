"""What a pmapped function reads when it changes between calls: globals,
closure cells, defaults, functions it calls. A new function object is traced
anew (it reads the new value); the same pmapped function called again with the
same argument types keeps what its first trace read, as classic pmap did. (A
pmap made anew of the same function object is traced anew by the migrated
code, where classic pmap reused its first trace: tests/test_migrate_translate.py.)"""
import numpy as np

import jax

x = np.ones((jax.local_device_count(), 2), np.float32)

# A module-level lambda in a loop: lr is a global read by each new lambda.
for lr in [1.0, 2.0, 3.0]:
    out = jax.pmap(lambda v: v * lr)(x)
    print("global lr", float(out[0, 0]))

# The same function object: its first trace is kept while the types stay.
scale = 10.0


def scaled(v):
    return v * scale


p_scaled = jax.pmap(scaled)
print("same function", float(p_scaled(x)[0, 0]))
scale = 20.0
print("same function, global changed", float(p_scaled(x)[0, 0]))
print("same function, new argument type", float(p_scaled(x.astype(np.int32))[0, 0]))


# Closure cells: each call of the factory makes a new function.
def make(k):
    def body(v):
        return v + k
    return body


for k in range(3):
    print("closure", float(jax.pmap(make(k))(x)[0, 0]))

# Defaults: the same code, different defaults.
for d in (1.0, 5.0):
    print("default", float(jax.pmap(lambda v, d=d: v * d)(x)[0, 0]))


# A function the body calls, replaced between calls.
def helper(v):
    return v + 100


def calls_helper(v):
    return helper(v)


print("nested reference", float(jax.pmap(calls_helper)(x)[0, 0]))


def helper(v):  # noqa: F811  (replaced on purpose)
    return v + 200


print("nested reference replaced, new function",
      float(jax.pmap(lambda v: calls_helper(v))(x)[0, 0]))

# Two lambdas with the same code and globals, values differing through a dict.
table = {"w": 2.0}
f1 = jax.pmap(lambda v: v * table["w"])
print("dict global", float(f1(x)[0, 0]))
table["w"] = 3.0
print("dict global, new lambda", float(jax.pmap(lambda v: v * table["w"])(x)[0, 0]))
