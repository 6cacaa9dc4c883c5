"""The pjit cases JAX's own suites (0.3.25, 0.4.2) still caught (issue 33,
item 4), each beside today's jax.jit where it has the same option:

- ``keep_unused=True`` holds ahead of time too: the compiled program keeps
  every parameter (``lower().compile()`` and the call's own miss path);
- explicit ``static_argnums`` and ``static_argnames`` are taken as given,
  even where they disagree (neither completes the other);
- an uncommitted array sharded over several devices is refused with
  ``NotImplementedError`` (in_axis_resources omitted), as classic pjit and
  jax.jit refuse it;
- a pjit traced in another pjit's body under a mesh context over other
  devices raises ``MeshChangedError``, both classic pjit's ``RuntimeError``
  and jax.jit's ``ValueError``, with both messages.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit import _jax_private as jp
from pmapkit.pjit._pjit import MeshChangedError


def unused_five(x, y, z, a, b, c):  # noqa: ARG001 - five unused on purpose
    return c @ c.T


SIX = (jnp.arange(8), jnp.arange(8), jnp.arange(8), jnp.arange(8), jnp.arange(8),
       jnp.arange(4))


@pytest.mark.parametrize("keep", [True, False])
def test_keep_unused_holds_ahead_of_time_as_jax_jit(keep):
    ours = pmapkit.pjit(unused_five, keep_unused=keep)
    theirs = jax.jit(unused_five, keep_unused=keep)
    mine = ours.lower(*SIX).compile()
    ref = theirs.lower(*SIX).compile()
    want = {0, 1, 2, 3, 4, 5} if keep else {5}
    assert mine._executable._kept_var_idx == ref._executable._kept_var_idx == want
    assert len(mine._executable.in_avals) == len(ref._executable.in_avals)
    if keep:
        assert len(mine._executable.in_avals) == 6
    np.testing.assert_array_equal(np.asarray(mine(*SIX)), np.asarray(ref(*SIX)))
    # The call's own program (miss, then the hit path) agrees.
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(ours(*SIX)), np.asarray(ref(*SIX)))


def test_keep_unused_program_keeps_the_parameters_in_its_text():
    kept = pmapkit.pjit(unused_five, keep_unused=True).lower(*SIX).as_text()
    pruned = pmapkit.pjit(unused_five).lower(*SIX).as_text()
    assert kept.count("tensor<8xi32>") >= 5 and "tensor<8xi32>" not in pruned


class TracerProbe:
    """A body asserting which of its parameters are traced (dynamic)."""

    def __init__(self):
        self.expect = (False, False)

    def __call__(self, x, y):
        got = (isinstance(x, jax.core.Tracer), isinstance(y, jax.core.Tracer))
        assert got == self.expect, f"traced {got}, expected {self.expect}"
        return 1


@pytest.mark.parametrize("make", [pmapkit.pjit, jax.jit], ids=["pmapkit.pjit", "jax.jit"])
def test_explicit_static_argnums_and_argnames_are_taken_as_given(make):
    probe = TracerProbe()
    by_position = make(probe, static_argnums=1, static_argnames=())
    probe.expect = (True, False)
    assert by_position(2, 3) == 1
    probe.expect = (True, True)            # y by keyword: not a static name
    assert by_position(1, y=2) == 1
    assert by_position(1, y=5) == 1        # a hit, y dynamic

    probe = TracerProbe()
    by_name = make(probe, static_argnums=(), static_argnames="y")
    probe.expect = (True, True)            # y by position: not a static position
    assert by_name(2, 3) == 1
    probe.expect = (True, False)
    assert by_name(1, y=3) == 1

    probe = TracerProbe()
    mixed = make(probe, static_argnums=(1,), static_argnames="x")
    probe.expect = (True, False)
    assert mixed(2, 3) == 1
    probe.expect = (True, True)
    assert mixed(1, y=3) == 1


def test_one_option_alone_is_still_completed_from_the_signature():
    probe = TracerProbe()
    f = pmapkit.pjit(probe, static_argnums=1)
    probe.expect = (True, False)
    assert f(2, 3) == 1
    assert f(2, y=4) == 1                  # y static by name too
    g = pmapkit.pjit(probe, static_argnames="y")
    assert g(2, 5) == 1                    # and by position


def test_a_static_position_left_out_is_still_refused():
    f = pmapkit.pjit(lambda a, b: a + b, None, None, static_argnums=2)
    with pmapkit.Mesh(np.array(jax.devices()[:2]), ("x",)):
        with pytest.raises(ValueError, match="but was called with only 2"):
            f(jnp.ones(2), jnp.ones(2))


def _uncommitted_on_8_devices():
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    sharding = NamedSharding(mesh, P(None))
    host = np.arange(16, dtype=np.int32).reshape(8, 2)
    return jp.ArrayImpl(jax.core.ShapedArray(host.shape, host.dtype), sharding,
                        [jax.device_put(host, d) for d in mesh.devices.flat],
                        committed=False)


@pytest.mark.parametrize("make", [pmapkit.pjit, jax.jit], ids=["pmapkit.pjit", "jax.jit"])
def test_uncommitted_array_on_several_devices_is_refused(make):
    arr = _uncommitted_on_8_devices()
    with pytest.raises(NotImplementedError,
                       match="Having uncommitted Array sharded on multiple devices"):
        make(lambda x: x)(arr)


def test_uncommitted_refusal_names_the_argument_and_one_device_still_runs():
    f = pmapkit.pjit(lambda a, b: a + b)
    with pytest.raises(NotImplementedError, match="argument 'b'"):
        f(jnp.zeros((8, 2), jnp.int32), _uncommitted_on_8_devices())
    one = jnp.ones((8, 2), jnp.int32)          # uncommitted, one device: fine
    np.testing.assert_array_equal(np.asarray(f(one, one)), 2 * np.ones((8, 2)))


def _nested_on_other_devices():
    @pmapkit.pjit
    def inner(v):
        return v * 2

    def outer(v):
        with pmapkit.Mesh(np.array(jax.devices()[:1]), ("x",)):
            h = pmapkit.pjit(lambda u: inner(u) + 1, P("x"), None)
            return h(v)

    return pmapkit.pjit(outer, P("x"), None)


def test_nested_pjit_on_another_mesh_raises_both_classic_and_jit_errors():
    f = _nested_on_other_devices()
    x = jnp.arange(60).reshape(2, 5, 6)
    with pmapkit.Mesh(np.array(jax.devices()[:2]), ("x",)):
        with pytest.raises(MeshChangedError) as info:
            f(x)
    err = info.value
    assert isinstance(err, RuntimeError) and isinstance(err, ValueError)
    text = str(err)
    assert text.startswith("Changing the physical mesh is not allowed inside pjit.")
    assert "incompatible devices for jitted computation" in text
    assert "device ids [0]" in text and "device ids [0, 1]" in text


def test_nested_pjit_on_the_same_mesh_still_runs():
    inner = pmapkit.pjit(lambda v: v * 2, P("x"), P("x"))
    outer = pmapkit.pjit(lambda v: inner(v) + 1, P("x"), P("x"))
    x = np.arange(8, dtype=np.float32)
    with pmapkit.Mesh(np.array(jax.devices()[:2]), ("x",)):
        np.testing.assert_array_equal(np.asarray(outer(x)), x * 2 + 1)
