"""Functions and classes the colocated_python tests run under both
implementations. They live at module level so that cloudpickle ships them by
reference: the counters below are then the test's own, not copies."""
import contextlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import colocated_python as jax_colocated

import pmapkit.colocated_python as pmapkit_colocated
from pmapkit import _jax_private as jp

IMPLS = {"jax": jax_colocated, "pmapkit": pmapkit_colocated}
SPECIALIZED = "colocated_python_func._get_specialized_func"

CALLS = []          # appended to by the functions below
_CALLS_LOCK = threading.Lock()


def impl_params():
    return pytest.mark.parametrize("impl", list(IMPLS))


@contextlib.contextmanager
def count_specializations():
    """Counts new input specializations (JAX's test event, fired by both)."""
    seen = []
    lock = threading.Lock()
    previous = jp.jax_util.test_event_listener

    def listener(name, *args):
        if name == SPECIALIZED:
            with lock:
                seen.append(name)
        if previous is not None:
            previous(name, *args)

    jp.jax_util.test_event_listener = listener
    try:
        yield seen
    finally:
        jp.jax_util.test_event_listener = previous


def record(tag):
    with _CALLS_LOCK:
        CALLS.append(tag)


# -- functions ----------------------------------------------------------------
def add_one(x):
    record("add_one")
    return x + 1


def identity(x):
    return x


def pytree_fun(pair, *, scale):
    a, b = pair
    return {"sum": a + b * scale, "parts": (a, b)}


def swap_pair(x, y):
    return y, x


def ones_on_device1():
    return jax.device_put(jnp.ones((3,), jnp.float32), jax.devices()[1])


def fail(x):
    raise RuntimeError(f"colocated failure on shape {x.shape}")


def return_numpy(x):
    return np.asarray(x)


def split_key(key):
    return jax.random.split(key, 3)


def double_ints(x):
    return x + x


def upper_strings(s):
    return s


def sharded_double(x):
    return x + x


def shape_changes(x):
    record("shape_changes")
    n = sum(1 for c in CALLS if c == "shape_changes")
    return x if n == 1 else x[:1]


def slow_add_one(x):
    import time
    time.sleep(0.01)
    record("slow")
    return x + 1


# -- classes --------------------------------------------------------------------
CREATED = []
DELETED = []


class Accumulator:
    """Keeps a running total on the devices' host."""

    def __init__(self, start):
        self.total = float(start)
        self._lock = threading.Lock()   # methods may run on several threads
        CREATED.append("accumulator")

    def add(self, x):
        """Add x and return the new total on x's device."""
        value = float(np.asarray(x).sum())
        with self._lock:
            self.total += value
        device = next(iter(x.sharding.device_set))
        return jax.device_put(jnp.float32(self.total), device)

    def current(self):
        return jax.device_put(jnp.float32(self.total), jax.devices()[0])


class Tracked:
    def __init__(self):
        CREATED.append("tracked")

    def touch(self, x):
        return x

    def __del__(self):
        DELETED.append("tracked")


class BrokenInit:
    def __init__(self):
        raise KeyError("cannot build")

    def use(self, x):
        return x
