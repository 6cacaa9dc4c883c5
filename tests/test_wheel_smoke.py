"""Smoke test of an installed pmapkit wheel.

cibuildwheel runs it on each built wheel, from a temporary directory and
without the suite's conftest (``pytest --noconftest``): 8 simulated CPU
devices, the compiled core, a pmap with psum and a pjit on a 2x4 mesh,
checked against numpy. It also runs as part of the suite.
"""
import os

# Must precede the first backend use; inside the suite conftest did it already.
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import pmapkit  # noqa: E402
from pmapkit import Mesh, PartitionSpec as P, pjit  # noqa: E402


IN_CIBUILDWHEEL = os.environ.get("CIBUILDWHEEL") == "1"


def test_wheel_smoke():
    with jax.enable_checks(True):   # as JAX's own test base runs
        _smoke()


def _smoke():
    here = os.path.realpath(pmapkit.__file__)
    print(f"pmapkit {here} compiled={pmapkit.COMPILED} devices={jax.device_count()}")
    if IN_CIBUILDWHEEL:   # a wheel under test: installed, and compiled
        assert "site-packages" in here, f"pmapkit imported from {here}, not an install"
        assert pmapkit.COMPILED is True, "the wheel's compiled core did not load"
    assert jax.device_count() == 8, jax.devices()

    x = np.arange(8, dtype=np.float32)
    shares = pmapkit.pmap(lambda v: v / jax.lax.psum(v, "i"), axis_name="i")(x)
    np.testing.assert_allclose(np.asarray(shares), x / x.sum(), rtol=1e-6)

    f = pjit(lambda a, w: jnp.tanh(a @ w), in_axis_resources=(P("x", None), None),
             out_axis_resources=P("x", "y"))
    a = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    w = np.linspace(0, 1, 32, dtype=np.float32).reshape(4, 8)
    with Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y")):
        out = f(a, w)
    np.testing.assert_allclose(np.asarray(out), np.tanh(a @ w), rtol=1e-5, atol=1e-6)
    assert out.sharding.spec == P("x", "y"), out.sharding
