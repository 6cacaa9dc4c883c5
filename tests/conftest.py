"""Test configuration: 8 simulated CPU devices, set before any backend starts."""
import os

# Must happen before jax creates its CPU client; jax is imported lazily by the
# test modules, but set both knobs so either mechanism wins.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
