"""Test configuration.

- 8 simulated CPU devices, set before any backend starts.
- The pmapkit under test is the *installed* one: the suite refuses to run
  against the checkout's ``pmapkit/`` shadowing the install (run it as README
  says, ``python -P -m pytest tests``: ``-P`` keeps the current directory off
  ``sys.path``).
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
# JAX's own test base runs with these checks; so does this suite (tests of
# promotion behaviour opt out locally, e.g. ``jax.numpy_rank_promotion("allow")``).
jax.config.update("jax_enable_checks", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_legacy_prng_key", "error")

import _install  # noqa: E402  (tests/_install.py)


def pytest_configure(config):
    problem = _install.shadowing_problem()
    if problem:
        raise pytest.UsageError(problem)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    # A whole-suite run spreads over the cores (tests/_suite_workers.py), one
    # test file per worker at a time: a file's module fixtures are made once.
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if (config.option.numprocesses is not None or config.option.collectonly
            or config.option.usepdb):
        return
    import _suite_workers
    workers = _suite_workers.count(config.args, os.environ, _suite_workers.cores())
    if workers:
        config.option.numprocesses = workers
        if config.option.dist == "no":
            config.option.dist = "loadfile"
