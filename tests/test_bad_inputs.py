"""Bad inputs the stress pass (`python -m stress`) found answered with an
internal error: each is now a TypeError/ValueError naming the argument and
what was expected, raised before anything runs."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import pmapkit
from pmapkit import export as pe
from pmapkit import host_callback as hcb

X = np.ones((len(jax.devices()), 3), np.float32)


@pytest.mark.parametrize("make,error,match", [
    (lambda: pmapkit.pmap(lambda v: v, axis_name=""), ValueError,
     "axis_name must be a non-empty str"),
    (lambda: pmapkit.pmap(lambda v: v, backend=1), TypeError,
     "pmap backend must be a platform name such as 'cpu' or None, got 1 of type int"),
    (lambda: pmapkit.pmap(lambda v: v, static_broadcasted_argnums=1.5), TypeError,
     "pmap static_broadcasted_argnums must be an int or a collection of ints, got 1.5"),
    (lambda: pmapkit.pmap(lambda v: v, donate_argnums=1.5), TypeError,
     "pmap donate_argnums must be an int or a collection of ints, got 1.5"),
    (lambda: pmapkit.pjit(lambda v: v, static_argnums=1.5), TypeError,
     "pjit static_argnums must be an int or a collection of ints, got 1.5"),
    (lambda: pmapkit.pjit(lambda v: v, static_argnames=1), TypeError,
     "pjit static_argnames must be a string or a collection of strings, got 1"),
    (lambda: pmapkit.Mesh(np.array([0, 1]), ("x",)), TypeError,
     "Mesh devices must be jax.Device objects .* got 0 of type int"),
    (lambda: pmapkit.Mesh(np.array([]), ("x",)), ValueError,
     r"Mesh devices must hold at least one device, got shape \(0,\)"),
    (lambda: pe.poly_spec((None, 3), jnp.float32, "("), ValueError,
     "Cannot parse the shape specification '\\('"),
], ids=["axis_name_empty", "backend_int", "static_float", "donate_float",
        "pjit_static_float", "pjit_static_argnames_int", "mesh_of_ints", "mesh_empty",
        "poly_spec_unparsable"])
def test_bad_option_is_a_clear_error(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_mapped_axis_of_size_zero_is_named():
    f = pmapkit.pmap(lambda v: v)
    with pytest.raises(ValueError, match=r"pmap got a mapped axis of size 0 \(argument "
                                         r"'v' \(positional argument 0\) has axis 0 of "
                                         r"size 0, type float32\[0,3\]\)"):
        f(np.ones((0, 3), np.float32))
    # Classic pmap (jax 0.2 to 0.4.30) raised ZeroDivisionError there, which
    # libraries' tests catch (jaxline's tree_psum test): it is both.
    for error in (ValueError, ZeroDivisionError):
        with pytest.raises(error):
            f({"a": jnp.array([]), "b": jnp.array([])})


def test_id_print_output_stream_without_write_is_refused_at_the_call():
    with pytest.raises(TypeError, match="id_print output_stream must be a text stream "
                                        "with a write method"):
        jax.jit(lambda v: hcb.id_print(v, output_stream=object()))(1.0)
    hcb.barrier_wait()  # nothing was left pending
