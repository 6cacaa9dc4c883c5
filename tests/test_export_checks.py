"""Strict checks (the classic ``strict_checks``): custom-call targets off the
stable list and platform mismatches are refused with clear errors;
``strict_checks=False`` relaxes both, and the choice survives serialization."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

from pmapkit import export as pe

from _export_helpers import assert_tree_close, sds, values


def _unstable_custom_call(x):
    return jax.ffi.ffi_call("pmapkit_test_unstable_target",
                            jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_unstable_custom_call_is_refused():
    with pytest.raises(ValueError, match=r"export of '_unstable_custom_call' with "
                                         r"strict_checks=True: the lowered module calls "
                                         r"custom-call targets \['pmapkit_test_unstable_target'\], "
                                         r"which are not on jax.export's list of stable "
                                         r"targets.*Pass strict_checks=False"):
        pe.export(_unstable_custom_call)(sds((3,)))


def test_unstable_custom_call_allowed_without_strict_checks():
    exported = pe.export(_unstable_custom_call, strict_checks=False)(sds((3,)))
    assert exported.strict_checks is False
    assert "pmapkit_test_unstable_target" in exported.mlir_module()
    loaded = pe.deserialize(pe.serialize(exported))
    assert loaded.strict_checks is False
    assert pe.artifact_info(pe.serialize(exported))["exported"]["strict_checks"] is False


def test_stable_custom_calls_pass_strict_checks():
    # LAPACK kernels (here: QR) are on the stable list.
    exported = pe.export(lambda a: jnp.linalg.qr(a)[1])(sds((4, 4)))
    assert exported.strict_checks
    assert "lapack" in exported.mlir_module()
    a = values((4, 4))
    r = pe.deserialize(pe.serialize(exported)).call(a)
    assert_tree_close(jnp.abs(r), jnp.abs(jnp.linalg.qr(a)[1]), tol=1e-4)


def test_platform_mismatch_is_refused_at_top_level():
    exported = pe.export(jnp.sin, lowering_platform="tpu")(sds((3,)))
    assert exported.lowering_platform == "tpu"
    loaded = pe.deserialize(pe.serialize(exported))
    with pytest.raises(ValueError, match=r"'sin' was lowered for platform\(s\) \['tpu'\] "
                                         r"but is called on 'cpu'.*strict_checks=False"):
        loaded.call(values((3,)))


def test_platform_mismatch_is_refused_inside_jit():
    exported = pe.export(jnp.sin, lowering_platform="tpu")(sds((3,)))
    with pytest.raises(ValueError, match=r"exported for platforms '\('tpu',\)' but it is "
                                         r"used on '\('cpu',\)'"):
        jax.jit(exported.call)(values((3,)))


@pytest.mark.parametrize("where", ["top", "jit"])
def test_platform_mismatch_allowed_without_strict_checks(where):
    exported = pe.export(jnp.sin, lowering_platform="tpu", strict_checks=False)(sds((3,)))
    loaded = pe.deserialize(pe.serialize(exported))
    call = loaded.call if where == "top" else jax.jit(loaded.call)
    x = values((3,))
    assert_tree_close(call(x), np.sin(x), tol=1e-6)


def test_strict_checks_read_from_a_jax_artifact():
    relaxed = jax_export.export(
        jax.jit(jnp.cos), disabled_checks=[jax_export.DisabledSafetyCheck.platform()])(sds((2,)))
    assert pe.from_jax(relaxed).strict_checks is False
    assert pe.from_jax(jax_export.export(jax.jit(jnp.cos))(sds((2,)))).strict_checks is True
