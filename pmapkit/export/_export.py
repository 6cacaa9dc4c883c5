"""``export(fun, ...)(*arg_specs, **kwarg_specs) -> Exported``, every vintage.

One ``export`` takes each vintage's options (mixing two vintages' spellings
of one option is an error naming both):

- the seed's jax2tf ``jax_export``: ``lowering_platform='cpu'`` (one
  platform), ``strict_checks=True|False``;
- ``jax.experimental.export`` (0.4.2x): ``lowering_platforms=[...]``,
  ``disabled_checks=[DisabledSafetyCheck...]``;
- ``jax.export``: ``platforms=[...]``, ``disabled_checks=[...]``.

Lowering and shape polymorphism are jax.export's (``jax.export.export`` on a
``jax.jit``); what pmapkit adds is which jit to export:

- a ``jax.jit`` function is exported as it is;
- a plain function is wrapped in ``jax.jit`` (as jax_export and
  jax.experimental.export did; jax.export itself asks for a jit);
- a ``pmapkit.pmap`` / ``pmapkit.pjit`` function is exported as the
  N-device program it compiles to: its flat inputs and outputs carry the
  program's shardings (the pmap's device mesh, or the pjit's shardings on the
  mesh active at export time), so the artifact records them and runs on N
  devices when called. Its pytree structure is put back on the result.

``strict_checks=False`` is ``disabled_checks=[platform(), custom_call("ALL")]``:
any custom-call target may be serialized and the artifact may run on another
platform.
"""
from __future__ import annotations

import dataclasses
import re

import jax
from jax import export as jax_export

from pmapkit import _jax_private as jp
from pmapkit.core.misses import calls
from pmapkit.core.programs import compiling
from pmapkit.core.lowering import kinds, lowering
from pmapkit.core.programs import process_local
from pmapkit.core.hitpath._compiled import dispatch as _dispatch_mod
from pmapkit.export._exported import Exported
from pmapkit.export._safety import RELAXED_CHECKS, checks_to_disable

KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
_PLATFORM_ALIASES = {"gpu": "cuda"}
_CUSTOM_CALL_ERROR = "Cannot serialize code with custom calls"


def default_export_platform() -> str:
    """The platform an export lowers for by default (JAX's default backend):
    one of 'cpu', 'cuda', 'rocm', 'tpu'. Also spelled
    ``default_lowering_platform`` (jax_export, jax.experimental.export)."""
    return jax_export.default_export_platform()


default_lowering_platform = default_export_platform


def _platform_name(p, what):
    # Names other than KNOWN_PLATFORMS are jax.export's to judge: it lowers
    # for platforms it has no backend for (a multi-platform artifact may name
    # one this jaxlib does not know).
    if not isinstance(p, str) or not p:
        raise TypeError(f"export: '{what}' must name platforms with non-empty "
                        f"str, got {p!r}.")
    return _PLATFORM_ALIASES.get(p.lower(), p.lower())


def _one_spelling(options):
    given = [name for name, value in options if value is not None]
    if len(given) > 1:
        raise ValueError(f"export got both {given[0]!r} and {given[1]!r}; they are "
                         "spellings of one option from different export APIs, "
                         "give one.")
    return given[0] if given else None


def _platforms(lowering_platform, lowering_platforms, platforms):
    which = _one_spelling((("lowering_platform", lowering_platform),
                           ("lowering_platforms", lowering_platforms),
                           ("platforms", platforms)))
    if which is None:
        return None
    if which == "lowering_platform":
        return (_platform_name(lowering_platform, which),)
    value = lowering_platforms if which == "lowering_platforms" else platforms
    if isinstance(value, str):
        value = (value,)
    names = tuple(_platform_name(p, which) for p in value)
    if not names:
        raise ValueError(f"export: '{which}' must name at least one platform.")
    if len(set(names)) != len(names):
        raise ValueError(f"export: '{which}' lists a platform twice: {list(names)}.")
    return names


def _disabled_checks(strict_checks, disabled_checks):
    which = _one_spelling((("strict_checks", strict_checks),
                           ("disabled_checks", disabled_checks)))
    if which == "disabled_checks":
        return checks_to_disable(disabled_checks)
    if which == "strict_checks" and not isinstance(strict_checks, bool):
        raise TypeError(f"export: 'strict_checks' must be a bool, got {strict_checks!r}.")
    return RELAXED_CHECKS if strict_checks is False else ()


def export(fun, *, lowering_platform=None, strict_checks=None,
           lowering_platforms=None, disabled_checks=None, platforms=None):
    """Return a function taking argument specs and returning an ``Exported``.

    Args:
      fun: a plain function, a ``jax.jit`` function, or a ``pmapkit.pmap`` /
        ``pmapkit.pjit`` function (a pjit one is exported on the pmapkit mesh
        active when the returned function is called).
      lowering_platform: (jax_export) one of 'cpu', 'cuda', 'rocm', 'tpu'.
      strict_checks: (jax_export) ``True`` (the default) keeps the safety
        checks (only custom calls with stable targets; the artifact runs only
        on its lowering platform(s)); ``False`` turns them off.
      lowering_platforms: (jax.experimental.export) a sequence of platforms.
      disabled_checks: (jax.experimental.export, jax.export) a sequence of
        ``DisabledSafetyCheck`` to turn off.
      platforms: (jax.export) a sequence of platforms (a module for several
        platforms picks its branch at run time). Default for all three
        spellings: the default backend.

    The returned function takes the arguments' specs: ``jax.ShapeDtypeStruct``
    values (from ``poly_spec``/``poly_specs``/``symbolic_shape``/
    ``symbolic_args_specs`` for shape polymorphism) or anything with
    ``.shape`` and ``.dtype`` (arrays too), in the pytree structure of the
    call; static arguments are passed as values.
    """
    if not callable(fun):
        raise TypeError(f"export: 'fun' must be callable, got {fun!r}.")
    chosen = _platforms(lowering_platform, lowering_platforms, platforms)
    disabled = _disabled_checks(strict_checks, disabled_checks)
    fun_name = getattr(fun, "__name__", None) or type(fun).__name__

    def do_export(*args_specs, **kwargs_specs) -> Exported:
        try:
            if isinstance(fun, _dispatch_mod.DispatchFunction):
                jexp = _export_pmapkit(fun, fun_name, chosen, disabled,
                                       args_specs, kwargs_specs)
            else:
                jitted = fun if isinstance(fun, jax.stages.Wrapped) else jp.jit(fun)
                jexp = jax_export.export(jitted, platforms=chosen,
                                         disabled_checks=disabled)(
                    *args_specs, **kwargs_specs)
        except ValueError as exc:
            if _CUSTOM_CALL_ERROR in str(exc):
                targets = sorted(set(re.findall(r"custom_call @([\w.$\-]+)", str(exc))))
                raise ValueError(
                    f"{_CUSTOM_CALL_ERROR} whose targets have no compatibility "
                    f"guarantees: export of '{fun_name}' with strict_checks=True: the lowered "
                    f"module calls custom-call targets {targets}, which are not "
                    "on jax.export's list of stable targets, so the artifact "
                    "could break with any jaxlib upgrade. Pass "
                    "strict_checks=False (or disabled_checks=[DisabledSafetyCheck"
                    ".custom_call(target)]) to export it anyway.") from exc
            _add_classic_version_words(exc)
            raise
        return Exported(jexp)

    do_export.__name__ = f"export_{fun_name}"
    return do_export


_VERSION_ERROR = re.compile(
    r"The requested export calling convention version (-?\d+) is outside the "
    r"range of supported versions")


def _add_classic_version_words(exc):
    """A calling-convention version out of range: jax.export's words, then
    the earlier vintages' (jax_serialization version), which their code and
    tests match."""
    found = _VERSION_ERROR.search(str(exc))
    if found:
        exc.args = (f"{exc} (The requested jax_serialization version "
                    f"{found.group(1)} is outside the range of supported versions: "
                    "the jax_export / jax.experimental.export name of the same "
                    "setting.)", *exc.args[1:])


def _export_pmapkit(fun, fun_name, platforms, disabled, args_specs, kwargs_specs):
    """Export a pmapkit.pmap/pjit function as its N-device program.

    ``fun.lower`` validates the specs and resolves the program (mesh, devices,
    shardings, donation) exactly as a call would; the export is a jit over the
    flat leaves with those shardings, calling ``fun`` itself.
    """
    lowered = fun.lower(*args_specs, **kwargs_specs)
    prepared = lowered._prepared
    in_shardings, out_shardings = kinds.program_shardings(
        lowered._primitive, prepared.params, prepared.in_avals)
    static = lowered._static
    nargs = len(args_specs)
    statics = [args_specs[i] for i in static]
    dyn_args = tuple(a for i, a in enumerate(args_specs) if i not in set(static))
    _, in_tree = jax.tree_util.tree_flatten((dyn_args, kwargs_specs))
    out_tree = prepared.out_tree

    if process_local.spans_processes(in_shardings + out_shardings):
        # A program spanning processes: under the export's jit the leaves are
        # global values, but calling ``fun`` there would read them as this
        # process's slices (a traced pmap runs on local devices). Bind the
        # program that ``lower`` resolved (global axis, every process's
        # devices) instead.
        def flat_program(*leaves):
            return tuple(compiling.bind_in_outer_trace(
                lowered._primitive, prepared.params, prepared.in_avals, list(leaves)))
    else:
        def flat_program(*leaves):
            dyn, kwargs = jax.tree_util.tree_unflatten(in_tree, leaves)
            out = fun(*calls.merge_static(static, statics, nargs, dyn), **kwargs)
            return tuple(out_tree.flatten_up_to(out))

    flat_program.__name__ = fun_name
    donate = tuple(i for i, d in enumerate(prepared.params["donated_invars"]) if d)
    jitted = jp.jit(flat_program, in_shardings=in_shardings,
                     out_shardings=out_shardings, donate_argnums=donate)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in prepared.in_avals]
    with lowering.own_jit_of_pmap():  # the export's jit, not the user's jit-of-pmap
        jexp = jax_export.export(jitted, platforms=platforms,
                                 disabled_checks=disabled)(*structs)
    return _with_trees(jexp, in_tree, out_tree, fun_name)


def _with_trees(jexp, in_tree, out_tree, fun_name):
    # jax.export.Exported is a frozen dataclass: a copy with the user's
    # pytree structures (the flat program's leaves are the user's leaves in
    # order) and name. Its VJP is built from the flat jaxpr, unaffected.
    return dataclasses.replace(jexp, in_tree=in_tree, out_tree=out_tree,
                               fun_name=fun_name)
