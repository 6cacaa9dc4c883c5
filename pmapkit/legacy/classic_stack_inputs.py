"""``jax.numpy``'s stacking functions given lists and tuples, as the classic
releases took them.

Until JAX 0.4.16 ``jnp.vstack``, ``hstack``, ``dstack``, ``column_stack``
and ``atleast_1d/2d/3d`` made an array of any element that was not one (a
list, a tuple such as the 1-tuple a ``vjp`` function returns), and the
stacking functions took any iterable, a generator included. JAX 0.4.17 to
0.9 still took such elements, with a DeprecationWarning (and, checking the
elements first, lost a generator's); ``jnp.trim_zeros`` took a list without
a word until 0.4.30. JAX 0.10 refuses all of them with a TypeError.

Under ``pmapkit run`` (``install()``) these functions take them again: each
element that is not array-like becomes ``jnp.asarray(element)``, with the
DeprecationWarning 0.4.30 gave, where it gave it (none for ``trim_zeros``,
none for a generator of arrays), and a generator or other iterator of elements is read
once into a list. Arrays, scalars and sequences of them go to JAX's own
function untouched.
"""
from __future__ import annotations

import collections.abc
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

_MARK = "_pmapkit_classic_stack_inputs"

#: Functions of one sequence of arrays (their first argument).
_OF_A_SEQUENCE = ("vstack", "hstack", "dstack", "column_stack")
#: Functions of arrays given as separate arguments.
_OF_ARGUMENTS = ("atleast_1d", "atleast_2d", "atleast_3d")


def _array_like(x) -> bool:
    # what JAX itself calls array-like: an array, anything with
    # __jax_array__, or a numpy scalar type (Python numbers included)
    return (isinstance(x, (np.ndarray, jax.Array))
            or getattr(x, "__jax_array__", None) is not None or np.isscalar(x))


def _as_arrays(name, values, warn=True, stacklevel=3):
    """``values`` with each element that is not array-like made an array;
    the classic DeprecationWarning names the first one (``stacklevel`` 3:
    at the caller of ``jnp.<name>``)."""
    first = next((i for i, v in enumerate(values) if not _array_like(v)), None)
    if first is None:
        return values
    if warn:
        warnings.warn(f"{name} requires ndarray or scalar arguments, got "
                      f"{type(values[first])} at position {first}. In a future JAX "
                      "release this will be an error.", DeprecationWarning,
                      stacklevel=stacklevel)
    return [v if _array_like(v) else jnp.asarray(v) for v in values]


def _of_a_sequence(name, modern):
    @functools.wraps(modern)
    def stack(tup, *args, **kwargs):
        if not isinstance(tup, (np.ndarray, jax.Array)):
            if isinstance(tup, collections.abc.Iterator):
                tup = list(tup)
            if isinstance(tup, collections.abc.Sequence):
                tup = _as_arrays(name, tup)
        return modern(tup, *args, **kwargs)
    return stack


def _of_arguments(name, modern):
    @functools.wraps(modern)
    def atleast(*arys):
        # 0.4.30 warned from inside its jitted atleast_*d, not at the caller
        # (so not shown under Python's default filters): here likewise
        return modern(*_as_arrays(name, arys, stacklevel=2))
    return atleast


def _trim_zeros(modern):
    @functools.wraps(modern)
    def trim_zeros(filt, *args, **kwargs):
        return modern(_as_arrays("trim_zeros", [filt], warn=False)[0], *args, **kwargs)
    return trim_zeros


def classic_sequence_elements() -> bool:
    """Install the classic stacking functions on ``jax.numpy`` (once per
    process); True when this call did."""
    if getattr(jnp.vstack, _MARK, False):
        return False
    served = {name: _of_a_sequence(name, getattr(jnp, name)) for name in _OF_A_SEQUENCE}
    served.update({name: _of_arguments(name, getattr(jnp, name)) for name in _OF_ARGUMENTS})
    served["trim_zeros"] = _trim_zeros(jnp.trim_zeros)
    for name, function in served.items():
        setattr(function, _MARK, True)
        setattr(jnp, name, function)
    return True
