"""Shared helpers of the host_callback tests: a thread-safe recording tap,
a custom_jvp function that taps its tangent."""
import threading

import jax
import numpy as np
import pytest

from pmapkit import host_callback as hcb


class Recorder:
    """A tap function recording ``(arg, transforms, device)`` per call."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []

    def __call__(self, arg, transforms, device=None):
        with self.lock:
            self.calls.append((arg, transforms, device))

    def take(self):
        """Wait for pending callbacks, then return and forget the calls."""
        hcb.barrier_wait()
        with self.lock:
            calls, self.calls = self.calls, []
        return calls

    def values(self):
        return [np.asarray(a).tolist() if not isinstance(a, (tuple, list, dict))
                else a for a, _, _ in self.take()]


@pytest.fixture
def rec():
    hcb.barrier_wait()  # nothing pending, no exception left from earlier tests
    recorder = Recorder()
    yield recorder
    hcb.barrier_wait()


def floats(x):
    """A tapped value as nested Python floats, for comparisons."""
    if isinstance(x, (tuple, list)):
        return type(x)(floats(v) for v in x)
    if isinstance(x, dict):
        return {k: floats(v) for k, v in x.items()}
    return np.asarray(x).tolist()


@pytest.fixture(autouse=True)
def drained():
    """Each test starts with no callback pending and no exception kept from
    an earlier test (tests that make callbacks fail check barrier_wait)."""
    try:
        hcb.barrier_wait()
    except hcb.CallbackException:
        pass
    yield


def square_tapping_its_tangent(tap, **tap_kwargs):
    """``x * x`` as a custom_jvp whose jvp rule taps the tangent with
    ``id_tap(tap, ...)``: under grad the tap sees transposed cotangents."""
    @jax.custom_jvp
    def f(x):
        return x * x

    @f.defjvp
    def f_jvp(primals, tangents):
        x, = primals
        return f(x), 2. * x * hcb.id_tap(tap, tangents[0], **tap_kwargs)

    return f
