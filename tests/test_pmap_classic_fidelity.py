"""Classic pmap behaviours JAX's suites filter or assert on.

- The jit-of-pmap UserWarning: classic pmap warned where a jit containing a
  pmap over several devices was lowered (jax-v0.7.2 pxla
  ``_raise_warnings_or_errors_for_jit_of_pmap``, nreps > 1), with its text;
  tracing alone (make_jaxpr, eager linearize/grad/vmap) and a 1-device pmap
  under jit were silent.
- device_put_sharded of shards already on their devices transfers nothing
  (it passes ``jax.transfer_guard("disallow_explicit")``, as JAX's did).
- ``pmap(f, devices=[])`` raises the classic ValueError when created
  (jax 0.10.2's pmap_test testNoDevicesError).
- A pmap compiles while ``jax.jit`` is patched away (``chex.fake_jit`` makes
  it the identity; jax 0.4.30's pmap compiled all the same): pmapkit builds
  its programs with JAX's own jit, not with what ``jax.jit`` names.
"""
from unittest import mock

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pmapkit

N = len(jax.devices())  # 8, forced by conftest
CLASSIC = ("Using jit-of-pmap can lead to inefficient data movement, as the outer "
           "jit does not preserve sharded data representations and instead "
           "collects input and output arrays onto a single device. Consider "
           "removing the outer jit unless you know what you're doing. See "
           "https://github.com/jax-ml/jax/issues/2926.")


def foo(x):
    return x * 2


def pmap_warnings(thunk):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thunk()
    return [str(w.message) for w in caught if "includes a pmap" in str(w.message)]


def test_jit_of_pmap_warning_text():
    msgs = pmap_warnings(lambda: jax.jit(pmapkit.pmap(foo))(jnp.arange(N, dtype=jnp.float32)))
    assert len(msgs) == 1
    # jax 0.4.30's text first (its pxla's words), then the later releases'.
    assert msgs[0].startswith(
        "The jitted function foo includes a pmap. " + CLASSIC.replace("jax-ml", "google"))
    assert "The function jit(foo) includes a pmap. " + CLASSIC in msgs[0]


# warnings' message= matches at the start of the text (re.match): a 0.4-era
# program's filter (as public code wrote it), jax-v0.7.2's, and JAX's suites'.
_FILTERS = {
    "0.4 era": r"The jitted function .* includes a pmap. Using jit-of-pmap can lead to "
               r"inefficient data movement",
    "0.7 era": "The function jit.foo. includes a pmap",
    "JAX's suites": ".*jit-of-pmap.*",
}


def _lowered_under(action, pattern):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", message=".*includes a pmap")
        warnings.filterwarnings(action, message=pattern)
        jax.jit(pmapkit.pmap(foo)).lower(jnp.arange(N, dtype=jnp.float32))  # AOT warns too
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("era", sorted(_FILTERS))
def test_either_eras_filter_silences_the_jit_of_pmap_warning(era):
    # Each filter alone decides the one warning: ignored (nothing recorded,
    # and the "error" filter behind it never reached).
    assert _lowered_under("ignore", _FILTERS[era]) == []


@pytest.mark.parametrize("era", sorted(_FILTERS))
def test_either_eras_filter_turns_the_warning_into_an_error(era):
    with pytest.raises(UserWarning, match="includes a pmap"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.filterwarnings("error", message=_FILTERS[era])
            jax.jit(pmapkit.pmap(foo)).lower(jnp.arange(N, dtype=jnp.float32))


def test_the_text_starts_with_the_wording_a_filter_asks_for():
    from pmapkit.core.lowering import jit_of_pmap
    classic_first, later_first = jit_of_pmap.texts("foo", "foo")
    with warnings.catch_warnings():
        warnings.filterwarnings("default", message=_FILTERS["0.7 era"])
        assert jit_of_pmap.chosen_text("foo", "foo") == later_first
    with warnings.catch_warnings():
        warnings.filterwarnings("default", message=_FILTERS["0.4 era"])
        assert jit_of_pmap.chosen_text("foo", "foo") == classic_first
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert jit_of_pmap.chosen_text("foo", "foo") == classic_first
    # A filter for another category does not choose.
    with warnings.catch_warnings():
        warnings.filterwarnings("default", message=_FILTERS["0.7 era"],
                                category=DeprecationWarning)
        warnings.simplefilter("default")
        assert jit_of_pmap.chosen_text("foo", "foo") == classic_first


@pytest.mark.parametrize("case", ["make_jaxpr", "make_jaxpr_of_jit", "linearize", "grad",
                                  "vmap", "jit_of_1_device_pmap", "eager"])
def test_jit_of_pmap_silent_where_classic_was(case):
    x = jnp.arange(N, dtype=jnp.float32)
    p = pmapkit.pmap(foo)
    thunk = {
        "make_jaxpr": lambda: jax.make_jaxpr(p)(x),
        "make_jaxpr_of_jit": lambda: jax.make_jaxpr(jax.jit(p))(x),
        "linearize": lambda: jax.linearize(p, x),
        "grad": lambda: jax.grad(lambda v: p(v).sum())(x),
        "vmap": lambda: jax.vmap(p)(jnp.ones((2, N))),
        "jit_of_1_device_pmap": lambda: jax.jit(
            pmapkit.pmap(foo, devices=jax.devices()[:1]))(x[:1]),
        "eager": lambda: p(x),
    }[case]
    assert pmap_warnings(thunk) == []


def test_jit_of_transformed_pmap_warns():
    x = jnp.arange(N, dtype=jnp.float32)
    grad = jax.jit(jax.grad(lambda v: pmapkit.pmap(foo)(v).sum()))
    assert len(pmap_warnings(lambda: grad(x))) == 1
    assert pmap_warnings(lambda: grad(x)) == []  # once per compile


def test_device_put_sharded_of_placed_shards_transfers_nothing():
    devices = jax.devices()
    shards = [jax.device_put(jnp.arange(3.0) + k, d) for k, d in enumerate(devices)]
    with jax.transfer_guard("disallow_explicit"):
        out = pmapkit.device_put_sharded(shards, devices)
    assert out.shape == (N, 3) and out.dtype == jnp.float32
    for shard, want, d in zip(sorted(out.addressable_shards, key=lambda s: s.index[0].start),
                              shards, devices):
        assert shard.device == d
        np.testing.assert_array_equal(np.asarray(shard.data)[0], np.asarray(want))
    # Same layout as before: it goes straight into a pmap.
    np.testing.assert_array_equal(pmapkit.pmap(lambda v: v + 1)(out), np.asarray(out) + 1)
    weak = pmapkit.device_put_sharded(
        [jax.device_put(jnp.asarray(1.0), d) for d in devices], devices)
    assert weak.weak_type
    with jax.transfer_guard("disallow_explicit"), pytest.raises(Exception, match="Disallowed"):
        pmapkit.device_put_sharded([np.zeros(3, np.float32)] * N, devices)  # host → device


def test_no_devices_error_at_the_call():
    # Classic pmap_test testNoDevicesError (jax-v0.7.2): building the wrapper
    # succeeds; calling or lowering it raises (jax 0.10's own pmap raises
    # at construction instead: the classic vintage is the reference).
    f = pmapkit.pmap(lambda x: x - jax.lax.psum(x, "i"), axis_name="i", devices=[])
    x = np.arange(N * 4, dtype=np.float32).reshape(N, 4)
    for call in (f, f.lower, jax.jit(f)):
        with pytest.raises(ValueError,
                           match=r"^'devices' argument to pmap must be non-empty, or None\."):
            call(x)


def test_nested_pmap_with_devices_classic_message():
    # jax-v0.7.2 pmap_test testNestedPmapsError's text.
    @pmapkit.pmap
    def foo(x):
        return pmapkit.pmap(lambda y: y, devices=jax.devices())(x)

    with pytest.raises(ValueError, match="Nested pmap with explicit devices argument."):
        foo(jnp.ones((N, 1)))


def test_a_pmap_compiles_while_jax_jit_is_patched_away():
    # chex 2021's fake_test: fake_jit patches jax.jit, then a real pmap runs.
    x = np.arange(2 * 3, dtype=np.float32).reshape(2, 3)
    with mock.patch("jax.jit", lambda fn, *a, **k: fn):
        doubled = pmapkit.pmap(lambda v: v * 2, axis_name="i")(x)
        summed = pmapkit.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(x)
        nested = pmapkit.pmap(pmapkit.pmap(lambda v: v + 1))(x.reshape(2, 3, 1))
    np.testing.assert_array_equal(np.asarray(doubled), x * 2)
    np.testing.assert_array_equal(np.asarray(summed), np.broadcast_to(x.sum(0), (2, 3)))
    np.testing.assert_array_equal(np.asarray(nested), x.reshape(2, 3, 1) + 1)
