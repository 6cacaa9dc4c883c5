"""``pmapkit.pjit``: the classic pjit on pmapkit's compiled dispatch core.

``pjit(fun, in_axis_resources, out_axis_resources, static_argnums,
donate_argnums)`` partitions ``fun`` over the mesh active *at the call site*
(``with pmapkit.Mesh(...)``): arguments are placed as ``in_axis_resources``
says (a pytree prefix of ``None | PartitionSpec``), results come back as
``jax.Array``s with ``NamedSharding``s of that mesh. The modern spelling
``in_shardings=`` / ``out_shardings=`` (NamedSharding or PartitionSpec) is
accepted too. ``with_sharding_constraint`` pins intermediate values.
"""
from __future__ import annotations

import functools

import jax
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit import calls, lowering, specs
from pmapkit import stages
from pmapkit._compiled import dispatch as _dispatch_mod
from pmapkit.mesh import current_mesh
from pmapkit.primitives import no_mesh, pjit_p, plain_avals

_UNSET = object()


def pjit(fun, in_axis_resources=_UNSET, out_axis_resources=_UNSET,
         static_argnums=(), donate_argnums=(), *, in_shardings=_UNSET,
         out_shardings=_UNSET):
    """Compile ``fun`` and partition it over the mesh active at each call.

    Args:
      fun: the function to compile; pure, taking and returning pytrees of
        arrays (static arguments excepted).
      in_axis_resources: a pytree prefix of the positional arguments tuple
        with ``None`` (replicated) or ``PartitionSpec`` leaves; a single spec
        applies to every argument.
      out_axis_resources: the same for the outputs.
      static_argnums: positional arguments that are compile-time constants.
      donate_argnums: positional arguments whose buffers may be reused.
      in_shardings / out_shardings: the modern spelling of the two above;
        leaves may also be ``NamedSharding``s.
    """
    spec = _PjitSpec(fun, in_axis_resources, out_axis_resources, static_argnums,
                     donate_argnums, in_shardings, out_shardings)
    fn = calls.make_dispatch(
        fun, functools.partial(_cache_miss, spec), spec.static,
        functools.partial(_lower, spec), functools.partial(_reduce, spec),
        spec.signature)
    fn._on_clear = spec.trace_cache.clear
    return fn


def _pick(classic, modern, classic_name, modern_name):
    if classic is not _UNSET and modern is not _UNSET:
        raise ValueError(f"pjit got both {classic_name} and {modern_name}; "
                         "they are two spellings of one option, give one.")
    if classic is _UNSET and modern is _UNSET:
        raise TypeError(f"pjit() missing required argument '{classic_name}' "
                        f"(or its modern spelling '{modern_name}').")
    return (classic, classic_name) if classic is not _UNSET else (modern, modern_name)


class _PjitSpec:
    """The validated decoration-time options of one pjit'd function."""

    def __init__(self, fun, in_axis_resources, out_axis_resources,
                 static_argnums, donate_argnums, in_shardings, out_shardings):
        if not callable(fun):
            raise TypeError(f"pjit requires a callable 'fun', got {fun!r} of "
                            f"type {type(fun).__name__}.")
        in_tree, self.in_what = _pick(in_axis_resources, in_shardings,
                                      "in_axis_resources", "in_shardings")
        out_tree, self.out_what = _pick(out_axis_resources, out_shardings,
                                        "out_axis_resources", "out_shardings")
        self.user_in = in_tree
        self.user_out = out_tree
        self.in_resources = specs.prepare_axis_resources(in_tree, self.in_what,
                                                         tupled_args=True)
        self.out_resources = specs.prepare_axis_resources(out_tree, self.out_what)
        self.fun = fun
        self.static = calls.argnum_tuple(fun, static_argnums, "static_argnums", "pjit")
        self.donate = calls.argnum_tuple(fun, donate_argnums, "donate_argnums", "pjit")
        overlap = set(self.static) & set(self.donate)
        if overlap:
            raise ValueError("pjit donate_argnums and static_argnums must not "
                             f"overlap, but both contain {sorted(overlap)}.")
        self.name = getattr(fun, "__name__", None) or type(fun).__name__
        self.trace_cache = calls.TraceCache()
        self.signature = calls.signature_of(fun)

    def pickle_state(self):
        return {"version": _dispatch_mod.PICKLE_VERSION, "fun": self.fun,
                "in": self.user_in, "out": self.user_out,
                "in_what": self.in_what, "out_what": self.out_what,
                "static_argnums": self.static, "donate_argnums": self.donate}


def _active_mesh(spec):
    current = current_mesh()
    if current is not None:
        return current.jax_mesh
    # Without a mesh context, NamedSharding leaves still name their mesh.
    for tree in (spec.in_resources, spec.out_resources):
        for leaf in jax.tree_util.tree_leaves(tree, is_leaf=specs.is_spec_leaf):
            if isinstance(leaf, NamedSharding):
                return leaf.mesh
    raise RuntimeError("pjit requires a non-empty mesh! Are you sure that it's "
                       "defined at the call site? (enter one with "
                       "`with pmapkit.Mesh(devices, axis_names):`)")


def _to_sharding(leaf, mesh):
    if isinstance(leaf, NamedSharding):
        return leaf
    if leaf is None:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, leaf.to_partition_spec())


def _check_against(what, resources, avals, mesh, describe):
    for k, (leaf, aval) in enumerate(zip(resources, avals)):
        parsed = (specs.ParsedPartitionSpec.from_user_input(leaf.spec, what)
                  if isinstance(leaf, NamedSharding) else leaf)
        leaf_mesh = leaf.mesh if isinstance(leaf, NamedSharding) else mesh
        if parsed is not None:
            parsed.check_shape(aval.shape, leaf_mesh, what,
                               describe(k) if describe else None)


class _Prepared:
    __slots__ = ("flat_args", "params", "out_tree", "in_avals")

    def with_flat_args(self, flat_args):
        """The same traced call for another call's arguments."""
        new = _Prepared()
        new.flat_args = flat_args
        new.params = self.params
        new.out_tree = self.out_tree
        new.in_avals = self.in_avals
        return new


def _prepare(spec, args, kwargs):
    if kwargs:
        raise NotImplementedError(
            "pjit does not support keyword arguments (as classic pjit); pass "
            f"{sorted(kwargs)} positionally.")
    nargs = len(args)
    needed = max(spec.static + spec.donate, default=-1)
    if needed >= nargs:
        raise ValueError(
            f"pjit'd function {spec.name} has static_argnums={spec.static}, "
            f"donate_argnums={spec.donate} but was called with only {nargs} "
            "positional arguments.")
    mesh = _active_mesh(spec)
    statics, dyn_positions, dyn_args = calls.split_static(spec.static, args, spec.name)
    flat, in_tree = jax.tree_util.tree_flatten((dyn_args, {}))
    describe = calls.LeafNames(spec.signature, dyn_positions, dyn_args, {})
    in_res = spec.in_resources
    if spec.static and isinstance(in_res, tuple) and len(in_res) == nargs:
        in_res = tuple(in_res[i] for i in dyn_positions)
    in_flat = specs.flatten_axis_resources(spec.in_what, in_res, dyn_args, True)
    in_avals = calls.abstractify(flat, describe, "pjit", "static_argnums")
    _check_against("pjit arguments", in_flat, in_avals, mesh, describe)

    donated = []
    for pos, arg in zip(dyn_positions, dyn_args):
        n_leaves = len(jax.tree_util.tree_leaves(arg))
        donated += [pos in spec.donate and not jp.debug_nans.value] * n_leaves

    with no_mesh():
        jaxpr, consts, out_tree = calls.trace_user_fun(
            "pjit", spec.fun, spec.static, statics, nargs, in_tree,
            plain_avals(in_avals), describe)
    out_shape_tree = jax.tree_util.tree_unflatten(out_tree, [object()] * out_tree.num_leaves)
    out_flat = specs.flatten_axis_resources(spec.out_what, spec.out_resources,
                                            out_shape_tree, False)
    _check_against("pjit outputs", out_flat, [v.aval for v in jaxpr.outvars], mesh, None)

    with no_mesh():  # as traced: checks retype the body
        jaxpr, hoisted = calls.close_jaxpr(jaxpr, consts)
    in_shardings = [_to_sharding(leaf, mesh) for leaf in in_flat]
    if hoisted:
        flat = hoisted + list(flat)
        in_avals = [jp.get_aval(c) for c in hoisted] + in_avals
        in_shardings = [NamedSharding(mesh, PartitionSpec())] * len(hoisted) + in_shardings
        donated = [False] * len(hoisted) + donated

    prepared = _Prepared()
    prepared.flat_args = flat
    prepared.in_avals = tuple(in_avals)
    prepared.out_tree = out_tree
    prepared.params = dict(
        jaxpr=jaxpr, in_shardings=tuple(in_shardings),
        out_shardings=tuple(_to_sharding(leaf, mesh) for leaf in out_flat),
        donated_invars=tuple(donated), name=spec.name)
    return prepared


def _prepare_cached(spec, args, kwargs):
    try:
        mesh = _active_mesh(spec)
    except RuntimeError:
        return _prepare(spec, args, kwargs)  # raises the no-mesh error
    return calls.prepare_cached(
        spec.trace_cache, lambda a, k: _prepare(spec, a, k), spec.static,
        args, kwargs, (mesh, jp.debug_nans.value))


def _cache_miss(spec, *args, **kwargs):
    prepared = _prepare_cached(spec, args, kwargs)
    flat = prepared.flat_args
    if not jp.trace_state_clean() or any(isinstance(x, jp.Tracer) for x in flat):
        outs = lowering.bind_in_outer_trace(pjit_p, prepared.params,
                                            prepared.in_avals, flat)
        return jax.tree_util.tree_unflatten(prepared.out_tree, outs), None
    calls.check_donation_aliases("pjit", spec, prepared, args, kwargs)
    compiled = lowering.compile_program(pjit_p, prepared.params, prepared.in_avals)
    outs = compiled.run_flat(flat)
    out = jax.tree_util.tree_unflatten(prepared.out_tree, outs)
    return out, compiled.fastpath(prepared.out_tree)


def _lower(spec, *args, **kwargs):
    return stages.lower_prepared(pjit_p, "pjit", spec, _prepare(spec, args, kwargs),
                                 args, kwargs)


def _reduce(spec):
    return (_unpickle_pjit, (spec.pickle_state(),))


def _unpickle_pjit(state):
    if state.get("version") != _dispatch_mod.PICKLE_VERSION:
        raise ValueError(
            f"Cannot unpickle a pmapkit.pjit function of pickle version "
            f"{state.get('version')!r}; this pmapkit reads version "
            f"{_dispatch_mod.PICKLE_VERSION}.")
    options = {state["in_what"]: state["in"], state["out_what"]: state["out"]}
    return pjit(state["fun"], static_argnums=state["static_argnums"],
                donate_argnums=state["donate_argnums"], **options)


def with_sharding_constraint(x, axis_resources):
    """Pin the sharding of ``x`` (a pytree) inside pjit (or jax.jit) to
    ``axis_resources`` (a pytree prefix of ``None | PartitionSpec |
    NamedSharding``) on the active mesh."""
    flat, tree = jax.tree_util.tree_flatten(x)
    if jp.trace_state_clean() and not any(isinstance(v, jp.Tracer) for v in flat):
        raise NotImplementedError(
            "with_sharding_constraint() should only be called inside pjit() "
            "(or another traced function such as jax.jit).")
    prepared = specs.prepare_axis_resources(axis_resources, "axis_resources")
    resources = specs.flatten_axis_resources("axis_resources", prepared, x, False)
    current = current_mesh()
    mesh = current.jax_mesh if current is not None else None
    if mesh is None and any(not isinstance(r, NamedSharding) for r in resources):
        raise RuntimeError(
            "with_sharding_constraint requires a non-empty mesh! Are you sure "
            "that it's defined at the call site?")
    avals = [jp.get_aval(v) for v in flat]
    _check_against("with_sharding_constraint arguments", resources, avals, mesh, None)
    outs = [jax.lax.with_sharding_constraint(v, _to_sharding(r, mesh))
            for v, r in zip(flat, resources)]
    return jax.tree_util.tree_unflatten(tree, outs)
