"""A failed ``host_callback.call`` is raised to its caller, never a value.

On one device (jax.jit, eager, a 1-device pmap) the computation fails as
with ``jax.pure_callback``. In a pmapkit.pmap over 8 devices the failing
device gets zeros until the end of the body, where every device fails at
once (none is left waiting in a collective: no abort, no hang), and the call
raises; later calls run normally and ``barrier_wait`` reports it too.
Whatever the body: collectives after the call, the call inside scan or a
cond taken on some devices only.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pmapkit
from pmapkit import host_callback as hcb

N = len(jax.devices())  # 8, forced by conftest


def host(x):
    if np.asarray(x).ravel()[0] == 3:  # device 3's slice
        raise ValueError("user exception")
    return x


def call(x):
    return hcb.call(host, x, result_shape=x)


BODIES = {
    "psum_after": lambda x: jax.lax.psum(call(x), "i"),
    "in_scan": lambda x: jax.lax.scan(
        lambda c, _: (jax.lax.psum(call(c), "i") * 0 + c, None), x, None, length=2)[0],
    "in_cond": lambda x: jax.lax.cond(x > 2, call, lambda v: v, x),
}


def assert_raises_user_exception(thunk):
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        np.asarray(thunk())
    assert "ValueError: user exception" in str(info.value)
    assert "CallbackException" in str(info.value)
    with pytest.raises(hcb.CallbackException) as barrier:
        hcb.barrier_wait()
    assert isinstance(barrier.value.__cause__, ValueError)


@pytest.mark.parametrize("body", BODIES)
def test_pmap_on_8_devices_raises(body):
    f = pmapkit.pmap(BODIES[body], axis_name="i")
    assert_raises_user_exception(lambda: f(jnp.arange(N, dtype=jnp.float32)))
    ok = jnp.arange(N, dtype=jnp.float32) + 10  # no slice starts with 3
    want = jax.pmap(lambda x: BODIES[body](x), axis_name="i")(ok)
    np.testing.assert_array_equal(np.asarray(f(ok)), np.asarray(want))
    hcb.barrier_wait()


def test_one_device_programs_raise():
    x = jnp.float32(3)
    assert_raises_user_exception(lambda: jax.jit(call)(x))
    assert_raises_user_exception(lambda: call(x))
    assert_raises_user_exception(
        lambda: pmapkit.pmap(call, devices=jax.devices()[:1])(x[None]))
    np.testing.assert_array_equal(np.asarray(jax.jit(call)(x + 1)), 4.0)
    hcb.barrier_wait()
