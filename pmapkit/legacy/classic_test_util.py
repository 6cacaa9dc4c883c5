"""``jax.test_util``'s classic names (public until JAX 0.3): ``JaxTestCase``
with the classic defaults, ``cases_from_list``, and the helpers JAX 0.10
still holds in ``jax._src.test_util`` (the same objects).

JAX's own test base (``jax._src.test_util``) imports absl-py, as the classic
``jax.test_util`` did: each value is built on first use, and without absl-py
reading one raises an ImportError saying to install it.
"""
from __future__ import annotations

import zlib

import jax
import numpy as np

from pmapkit import _jax_private as jp

__all__ = ["CLASSIC_DEFAULTS", "SAME_OBJECTS", "jax_test_case", "cases_from_list",
           "same_object"]

#: What the classic JaxTestCase set around each test (JAX 0.2: checks on),
#: and the defaults of what later JAX test bases made stricter (raw uint32
#: PRNG keys, standard dtype promotion, implicit rank promotion), which the
#: classic class never changed.
CLASSIC_DEFAULTS = (("enable_checks", True), ("numpy_dtype_promotion", "standard"),
                    ("numpy_rank_promotion", "allow"), ("legacy_prng_key", "allow"))

#: Classic ``jax.test_util`` names JAX 0.10 holds in ``jax._src.test_util``.
SAME_OBJECTS = ("check_eq", "check_close", "device_under_test", "default_tolerance",
                "_default_tolerance", "tolerance", "format_shape_dtype_string",
                "rand_uniform", "skip_on_devices", "with_config", "JaxTestLoader")


def _test_util(name):
    try:
        return jp.private_module("jax._src.test_util")
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f"jax.test_util.{name} needs absl-py, as the classic jax.test_util did "
            f"({e}): pip install absl-py", name=e.name) from e


def same_object(name):
    def make():
        return getattr(_test_util(name), name)
    return make


def jax_test_case():
    """Classic ``jax.test_util.JaxTestCase``: JAX's test base with the classic
    defaults (``CLASSIC_DEFAULTS``), a per-test ``rng()`` seeded from the test
    name, and no check that a test left the global config unchanged (the
    classic class restored what it set, nothing more)."""
    base = _test_util("JaxTestCase").JaxTestCase

    class JaxTestCase(base):
        """Classic ``jax.test_util.JaxTestCase`` (served by pmapkit.legacy)."""

        _default_global_config = {}
        _default_thread_local_config = {}

        def setUp(self):
            super(base, self).setUp()          # absl's parameterized TestCase
            self._rng = np.random.RandomState(zlib.adler32(self._testMethodName.encode()))
            for option, value in CLASSIC_DEFAULTS:
                self.enterContext(getattr(jax, option)(value))

        def assertArraysEqual(self, x, y, *, check_dtypes=True, err_msg="", **kwargs):
            # Operands numpy makes an object array of (a tuple holding a
            # dict, arrays of several shapes): the classic method compared
            # them with numpy's own element-wise equality; JAX 0.10's refuses
            # them (TypeError).
            if _object_operands(x, y):
                np.testing.assert_array_equal(x, y, err_msg=err_msg)
                return
            super().assertArraysEqual(x, y, check_dtypes=check_dtypes, err_msg=err_msg,
                                      **kwargs)

    JaxTestCase.__module__ = "jax.test_util"
    return JaxTestCase


def _object_operands(*operands):
    """Whether numpy makes an object array of any operand (or cannot make
    one array of it at all)."""
    for value in operands:
        try:
            if np.asarray(value).dtype == object:
                return True
        except (ValueError, TypeError):
            return True
    return False


_PERMUTATIONS = {}


def cases_from_list():
    def cases_from_list(xs):
        """Classic ``jax.test_util.cases_from_list``: at most
        ``JAX_NUM_GENERATED_CASES`` of ``xs``, the same ones every run (a
        permutation drawn once per length with seed 42)."""
        xs = list(xs)
        n = len(xs)
        k = min(n, _test_util("cases_from_list").NUM_GENERATED_CASES.value)
        order = _PERMUTATIONS.get(n)
        if order is None:
            order = _PERMUTATIONS[n] = np.random.RandomState(42).permutation(n)
        return [xs[i] for i in order[:k]]
    cases_from_list.__module__ = "jax.test_util"
    return cases_from_list
