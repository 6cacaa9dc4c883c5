"""Benchmark-suite configuration: 8 simulated CPU devices, set before any
backend starts (as in tests/conftest.py), and the suite's size options."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)


def pytest_addoption(parser):
    group = parser.getgroup("pmapkit-bench", "pmapkit dispatch benchmarks")
    group.addoption("--pmapkit-rounds", type=int, default=5,
                    help="pytest-benchmark rounds per case x impl (default 5)")
    group.addoption("--pmapkit-round-seconds", type=float, default=0.02,
                    help="target seconds per round; sets iterations (default 0.02)")
