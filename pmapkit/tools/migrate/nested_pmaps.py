"""A pmap in a pmap's body, planned before the rewrite: which sites become one
``jax.shard_map`` over a 2-D mesh (the outer pmap's axis, then the inner's)
with a ``jax.shard_map`` over the inner axis inside it.

Classic JAX ran a pmap called in a pmapped body on its own axis of devices
(outer size × inner size, the first devices). The translation:

- the outer pmap decorator becomes a shard_map manual over its own axis of a
  2-D mesh; its inner axis takes the devices left (``_first_devices``: local
  devices // the outer size, as a classic nest of pmaps over every device had);
- each inner pmap decorator becomes a shard_map manual over the inner axis, on
  the mesh of the enclosing shard_map (no mesh, no ``jax.jit``: it is traced in
  the outer one's body);
- what an inner def reads from the outer body (JAX 0.10's nested shard_map
  refuses a value closed over from the enclosing one) becomes parameters of
  its own, mapped as ``None`` (every inner device holds it: classic pmap's
  closure), passed at each call in the outer body.

A nest is planned only when the source says all of it: the outer is one pmap
decorator on a def; every inner is one pmap decorator on a def, called by its
name and only in the outer body (its name read nowhere else), with no pmap
inside it, and all inners name one axis (or none). Anything else stays a
pmap of a pmap, left with its comment (``rules_pmap.NESTED``).
"""
from __future__ import annotations

import dataclasses

import libcst as cst
from libcst.metadata import PositionProvider, ScopeProvider

from pmapkit.tools.migrate import syntax as sx


@dataclasses.dataclass
class Inner:
    """An inner pmap-decorated def: its decorator and the names of the outer
    body it reads (passed as parameters after its own, in that order)."""
    function: cst.FunctionDef
    decorator: cst.BaseExpression
    closure: tuple = ()
    calls: list = dataclasses.field(default_factory=list)   # its calls in the outer body


@dataclasses.dataclass
class Nest:
    """An outer pmap-decorated def and the inner pmap-decorated defs it calls."""
    function: cst.FunctionDef
    decorator: cst.BaseExpression
    inners: list
    axis_names: tuple = ()      # (outer, inner) source texts (rules_pmap.nest_axis_names)


class Unplanned(Exception):
    """Why a pmap of a pmap stays as written."""


def _body_scope(ctx, function):
    return ctx.get_metadata(ScopeProvider, function.body.body[0])


def _one_pmap_decorator(pmaps, function):
    sites = [d.decorator for d in function.decorators if pmaps.site(d.decorator)]
    if len(sites) != 1:
        raise Unplanned("more than one pmap decorator")
    return sites[0]


def _closure(ctx, function, outer_scope):
    """The names ``function`` (and scopes in it) reads from ``outer_scope``, in the
    order they first appear."""
    found = {}
    scopes = {id(s): s for n in sx.nodes(function.body)
              for s in [ctx.get_metadata(ScopeProvider, n, None)] if s is not None}
    for scope in scopes.values():
        for access in scope.accesses:
            if any(getattr(r, "scope", None) is outer_scope for r in access.referents):
                pos = ctx.get_metadata(PositionProvider, access.node)
                name = access.node.value if isinstance(access.node, cst.Name) else None
                if name is None:
                    raise Unplanned("it reads the outer body through a name migrate cannot see")
                found[name] = min(found.get(name, (pos.start.line, pos.start.column)),
                                  (pos.start.line, pos.start.column))
    return tuple(sorted(found, key=found.get))


def _positional_only(function):
    params = function.params
    if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params or \
            params.star_kwarg is not None or any(p.default is not None for p in params.params):
        raise Unplanned("its def has defaults, *args, keyword-only or **kwargs parameters, "
                        "after which the values it reads from the outer body cannot be passed")


def plan(ctx, pmaps, outer_function, inner_functions):
    """The ``Nest`` of ``outer_function`` (a pmap-decorated def) and the pmap-decorated
    defs called in its body, or ``Unplanned`` saying why not."""
    outer_decorator = _one_pmap_decorator(pmaps, outer_function)
    outer_scope = _body_scope(ctx, outer_function)
    calls = {id(n.func): n for n in sx.nodes(outer_function.body) if isinstance(n, cst.Call)}
    inners = []
    for function in inner_functions:
        decorator = _one_pmap_decorator(pmaps, function)
        if any(pmaps.site(n) for n in sx.nodes(function.body)
               if isinstance(n, (cst.Call, cst.Name, cst.Attribute))):
            raise Unplanned("a pmap inside the inner pmap (three levels)")
        scope = ctx.get_metadata(ScopeProvider, function)
        bindings = [a for a in scope.assignments[function.name.value]]
        if len(bindings) != 1 or getattr(bindings[0], "node", None) is not function:
            raise Unplanned(f"{function.name.value} is bound more than once")
        inner = Inner(function, decorator)
        for access in bindings[0].references:
            call = calls.get(id(access.node))
            if call is None:
                raise Unplanned(f"{function.name.value} is used other than called in the "
                                "pmapped body")
            inner.calls.append(call)
        if not inner.calls:
            raise Unplanned(f"{function.name.value} is not called in the pmapped body")
        inner.closure = _closure(ctx, function, outer_scope)
        if inner.closure:
            _positional_only(function)
            if len(function.decorators) != 1:
                raise Unplanned("another decorator on the inner def would see the values it "
                                "reads from the outer body as new parameters")
            for call in inner.calls:
                at = ctx.get_metadata(ScopeProvider, call)
                if any(getattr(r, "scope", None) is not outer_scope
                       for name in inner.closure for r in at[name]) or any(
                        a.keyword is not None or a.star for a in call.args):
                    raise Unplanned(f"a call of {function.name.value} sees another "
                                    f"{'/'.join(inner.closure)} or passes keywords or *args")
        inners.append(inner)
    return Nest(outer_function, outer_decorator, inners)
