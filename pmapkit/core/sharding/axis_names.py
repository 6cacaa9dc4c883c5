"""Axis names as classic pmap took them: any hashable.

JAX's axis environment takes any hashable name, so a pmap body is traced
with the user's own name (``lax.psum(x, name)``, ``axis_index``, nested
pmaps, grad/vmap rules and JAX's errors all see it). Meshes and
PartitionSpecs need strings (a tuple in a PartitionSpec means several
axes), so where a program meets its mesh a name that is not a string is
given one (``mesh_name``: equal names share it, as equal names were one axis
in classic pmap) and the body's equations are renamed to it
(``renamed``), once per lowering. pjit's meshes and PartitionSpecs, which
classic JAX also let name axes with any hashable, take the same strings
(``pmapkit.Mesh``, ``ParsedPartitionSpec``); messages show the user's name
(``shown``).
"""
from __future__ import annotations

import threading

from pmapkit import _jax_private as jp

_PREFIX = "_pmapkit_axis_"
_lock = threading.Lock()
_mesh_names: dict = {}   # a user's non-str name -> its mesh axis name


def check_axis_name(name, api="pmap"):
    """``name`` if it can name an axis (None or any hashable), else the
    TypeError classic pmap's hashing raised, naming the argument."""
    try:
        hash(name)
    except TypeError:
        raise TypeError(
            f"{api} axis_name must be hashable (a str, or any hashable object "
            f"such as a tuple of hashables), got {name!r} of type "
            f"{type(name).__name__}.") from None
    return name


def mesh_name(name):
    """The mesh axis name (a str) of the axis the user named ``name``."""
    if type(name) is str:
        return name
    found = _mesh_names.get(name)
    if found is None:
        with _lock:
            found = _mesh_names.setdefault(name, f"{_PREFIX}{len(_mesh_names)}")
    return found


def shown(name):
    """A mesh axis name as the user wrote it (for messages)."""
    if isinstance(name, str) and name.startswith(_PREFIX):
        for user, mesh in list(_mesh_names.items()):
            if mesh == name:
                return user
    return name


def renaming(names):
    """``{user name: mesh name}`` for the names among ``names`` that are not
    strings; empty (nothing to rename) in the usual all-str case."""
    return {n: mesh_name(n) for n in names if type(n) is not str}


# Equation parameters that hold axis names: reductions' ``axes`` (whose ints
# are positional axes, never names), and ``axis_name`` (one name, or a tuple
# of names) of the other collectives, ``axis_index`` and pmapkit's pmap.
_AXES_PARAMS = ("axes",)
_NAME_PARAMS = ("axis_name",)


def renamed(closed_jaxpr, mapping):
    """``closed_jaxpr`` with every use of a name in ``mapping`` renamed, in
    every nested jaxpr too (jit, scan, cond, custom rules, nested pmaps)."""
    if not mapping:
        return closed_jaxpr
    return _closed(closed_jaxpr, mapping)


def _closed(cj, mapping):
    return cj.replace(jaxpr=_open(cj.jaxpr, mapping))


def _open(jaxpr, mapping):
    eqns = [eqn.replace(params=_params(eqn.params, mapping),
                        effects=_effects(eqn.effects, mapping))
            for eqn in jaxpr.eqns]
    return jaxpr.replace(eqns=eqns, effects=_effects(jaxpr.effects, mapping))


def _params(params, mapping):
    out = {}
    for key, value in params.items():
        if key in _AXES_PARAMS and isinstance(value, tuple):
            value = tuple(a if isinstance(a, int) else mapping.get(a, a)
                          for a in value)
        elif key in _NAME_PARAMS:
            value = _name(value, mapping)
        else:
            value = _nested(value, mapping)
        out[key] = value
    return out


def _name(value, mapping):
    try:
        if value in mapping:   # one name (a tuple may be one name)
            return mapping[value]
    except TypeError:
        return value
    if isinstance(value, tuple):
        return tuple(mapping.get(a, a) for a in value)
    return value


def _nested(value, mapping):
    if isinstance(value, jp.ClosedJaxpr):
        return _closed(value, mapping)
    if isinstance(value, jp.Jaxpr):
        return _open(value, mapping)
    if isinstance(value, (tuple, list)) and any(
            isinstance(v, (jp.ClosedJaxpr, jp.Jaxpr)) for v in value):
        items = [_nested(v, mapping) for v in value]
        if hasattr(value, "_fields"):      # a namedtuple of jaxprs
            return type(value)(*items)
        return type(value)(items)
    return value


def _effects(effects, mapping):
    if not any(isinstance(e, jp.NamedAxisEffect) for e in effects):
        return effects
    return type(effects)(
        jp.NamedAxisEffect(mapping.get(e.name, e.name))
        if isinstance(e, jp.NamedAxisEffect) else e for e in effects)
