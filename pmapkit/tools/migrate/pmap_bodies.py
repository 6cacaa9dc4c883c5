"""A pmap-decorated def translated as a JAX engineer writes a shard_map body.

``jax.shard_map`` hands each device a block that keeps the mapped axis (of
length 1 on a mesh as long as the mapped size); classic pmap's body saw the
slice without it. Where the def is plain enough (parameters by position
only, no defaults, ``in_axes`` an axis or ``None`` per parameter, ``out_axes``
one axis or ``None``, no statics, a body of statements), the body says so
itself, with no helper: its first line takes the axis off the mapped
parameters, and each ``return`` puts it back:

    @functools.partial(jax.jit, donate_argnums=(0,))
    @functools.partial(jax.shard_map, mesh=..., in_specs=jax.P("batch"), ...)
    def train_step(params, x, y):
        params, x, y = jax.tree.map(lambda v: jnp.squeeze(v, 0), (params, x, y))
        ...
        return jax.tree.map(lambda v: jnp.expand_dims(v, 0), (params, loss))

``jnp`` is the file's own name for ``jax.numpy`` (else ``jax.numpy``).
``squeeze`` refuses a block longer than 1 (a mapped size other than the
mesh's), as ``_per_device`` does, rather than dropping data.
"""
from __future__ import annotations

import dataclasses

import libcst as cst

from pmapkit.tools.migrate import syntax as sx

WIDTH = 99


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a def's body takes off and puts back the mapped axis."""
    squeezed: tuple     # ((axis, (parameter names...)), ...)
    out_axis: int | None
    leaf: str = "v"     # the inner lambda's parameter: no parameter's name


def plain_params(params):
    """The names of ``params`` when each is positional, without a default, else None."""
    return _simple_params(params)


def _simple_params(params):
    """The names of ``params`` when each is positional, without a default, else None."""
    if (params.star_arg is not cst.MaybeSentinel.DEFAULT and params.star_arg is not None
            or params.kwonly_params or params.star_kwarg or params.posonly_params):
        return None
    if any(p.default is not None for p in params.params):
        return None
    return [p.name.value for p in params.params]


def _axis(node_value):
    return node_value if node_value is None or isinstance(node_value, int) else False


def _star_params(params):
    """The names of ``params`` when each is positional without a default and the
    last is ``*args`` (a tuple the squeeze maps as one tree), else None."""
    star = params.star_arg
    if not isinstance(star, cst.Param) or star.default is not None or (
            params.kwonly_params or params.star_kwarg or params.posonly_params):
        return None
    if any(p.default is not None for p in params.params):
        return None
    return [p.name.value for p in params.params] + [star.name.value]


def plan(fn, site):
    """The ``Plan`` of the pmap-decorated ``fn`` translated by ``site``, or None
    where the def needs ``_per_device``. A def of ``*args`` (and plain parameters
    before it) mapped along one axis for all takes it off ``args`` as a tree."""
    if isinstance(fn, cst.Lambda):
        names = _simple_params(fn.params)
    elif isinstance(fn.body, cst.IndentedBlock) and not fn.asynchronous and not _yields(
            fn.body):
        names = _simple_params(fn.params)
        if names is None and isinstance(site.in_axes, int):
            names = _star_params(fn.params)
    else:
        names = None
    if site.static or not names:
        return None
    axes = site.in_axes if isinstance(site.in_axes, tuple) else (site.in_axes,) * len(names)
    if len(axes) != len(names) or any(_axis(a) is False for a in axes):
        return None
    if _axis(site.out_axes) is False:
        return None
    groups = {}
    for name, axis in zip(names, axes):
        if axis is not None:
            groups.setdefault(axis, []).append(name)
    if not groups:
        return None
    leaf = next(n for n in ("v", "a", "t", "leaf", "block") if n not in names)
    return Plan(tuple((a, tuple(n)) for a, n in groups.items()), site.out_axes, leaf)


class _Own(cst.CSTVisitor):
    """The ``return``/``yield`` nodes of a def's own body (not of the defs,
    lambdas and classes inside it)."""

    def __init__(self):
        self.returns, self.yields = [], False

    def visit_FunctionDef(self, node):
        return False

    def visit_Lambda(self, node):
        return False

    def visit_ClassDef(self, node):
        return False

    def visit_Return(self, node):
        self.returns.append(node)

    def visit_Yield(self, node):
        self.yields = True


def _own(body):
    visitor = _Own()
    body.visit(visitor)
    return visitor


def _yields(body):
    return _own(body).yields


def _squeeze_lines(plan, numpy):
    lines = []
    for axis, names in plan.squeezed:
        target = ", ".join(names)
        value = target if len(names) == 1 else f"({target})"
        lines.append(f"{target} = jax.tree.map(lambda {plan.leaf}: "
                     f"{numpy}.squeeze({plan.leaf}, {axis}), {value})")
    return lines


def _returned(value, plan, numpy, column):
    """The text of ``return`` giving ``value`` its mapped axis back, at ``column``."""
    text = sx.code(value)
    if isinstance(value, cst.Tuple) and not value.lpar:
        text = f"({text})"
    return _returned_text(text, plan, numpy, column)


def _returned_text(text, plan, numpy, column, continuation="    "):
    head = (f"jax.tree.map(lambda {plan.leaf}: "
            f"{numpy}.expand_dims({plan.leaf}, {plan.out_axis}), ")
    line = f"return {head}{text})"
    if column + len(line) <= WIDTH or "\n" in text:
        return line
    # in a block libcst writes (the next line's indentation is relative: libcst puts
    # the block's before it); in a def parsed whole, ``continuation`` is absolute
    return f"return jax.tree.map(\n{continuation}{head[len('jax.tree.map('):]}{text})"


def named_def(name, lam, decorators, plan, numpy, inner=None):
    """The text of ``name = jax.pmap(lambda ...: body, ...)`` as a named def under
    ``decorators`` (texts), its body taking the mapped axis off and back.
    ``inner``: a ``StaticPlan`` (with statics): ``decorators`` are jax.jit's, and
    the body is a def of the mapped parameters under the ``inner.decorator``,
    reading the static ones from the def around it."""
    body = lam.body
    text = sx.code(body)
    if isinstance(body, cst.Tuple) and not body.lpar:
        text = f"({text})"
    lines = [f"@{d}" for d in decorators]
    params = [p.name.value for p in lam.params.params]
    lines.append(f"def {name}({', '.join(params)}):")
    step = "    "
    if inner is not None:
        lines += [f"    @{inner.decorator}", f"    def {inner.name}({', '.join(inner.dynamic)}):"]
        step = "        "
    lines += [step + line for line in _squeeze_lines(plan, numpy)]
    if plan.out_axis is None:
        lines.append(f"{step}return {text}")
    else:
        lines.append(step + _returned_text(text, plan, numpy, len(step), step + "    "))
    if inner is not None:
        lines.append(f"    return {inner.name}({', '.join(inner.dynamic)})")
    return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class StaticPlan:
    """A pmap with statics as a named def: jax.jit's, its static parameters read by
    a def of the mapped ones (``name``) under ``decorator`` (the shard_map's)."""
    plan: Plan
    dynamic: tuple
    name: str
    decorator: str = ""


class _Unmapped:
    """A site as ``plan`` reads it, less its statics."""

    def __init__(self, site):
        self.in_axes, self.out_axes, self.static = site.in_axes, site.out_axes, ()


def static_plan(fn, site):
    """The ``StaticPlan`` of ``fn`` (a def or a lambda) pmapped with statics by
    ``site``, or None where it needs ``_per_device``."""
    if isinstance(fn, cst.FunctionDef) and (not isinstance(fn.body, cst.IndentedBlock)
                                            or fn.asynchronous or _yields(fn.body)):
        return None
    names = _simple_params(fn.params)
    if not names or not site.static or max(site.static) >= len(names):
        return None
    dynamic = tuple(n for k, n in enumerate(names) if k not in site.static)
    if not dynamic:
        return None
    shape = cst.parse_expression(f"lambda {', '.join(dynamic)}: 0")
    plan_ = plan(shape, _Unmapped(site))
    if plan_ is None:
        return None
    used = {n.value for n in sx.nodes(fn) if isinstance(n, cst.Name)}
    name = next(n for n in ("per_device", "on_each_device", "per_device_body", "_mapped")
                if n not in used)
    return StaticPlan(plan_, dynamic, name)


def rewrite_static(ctx, original, updated, static, numpy):
    """``updated`` (a def pmapped with statics) as jax.jit's def of all the
    parameters whose body is a def of the mapped ones (``static``), its body the
    original one taking the mapped axis off and back, called last."""
    body = list(updated.body.body)
    doc = body[:1] if body and _docstring(body[0]) else []
    inner = updated.with_changes(
        name=cst.Name(static.name), decorators=[cst.Decorator(sx.expr(static.decorator))],
        params=cst.Parameters([cst.Param(cst.Name(n)) for n in static.dynamic]),
        body=updated.body.with_changes(body=body[len(doc):]), leading_lines=[],
        returns=None)
    inner = rewrite(ctx, original, inner, static.plan, numpy)
    if inner is None:
        return None
    call = cst.parse_statement(f"return {static.name}({', '.join(static.dynamic)})\n")
    return updated.with_changes(body=updated.body.with_changes(body=doc + [inner, call]))


def rewrite(ctx, original, updated, plan, numpy):
    """``updated`` (the def) with its body taking off and putting back the mapped axis."""
    body = list(updated.body.body)
    at = 1 if body and _docstring(body[0]) else 0
    squeezes = [cst.parse_statement(line + "\n") for line in _squeeze_lines(plan, numpy)]
    body[at:at] = squeezes
    new = updated.with_changes(body=updated.body.with_changes(body=body))
    if plan.out_axis is None:
        return new
    olds = [r for r in _own(original.body).returns if r.value is not None]
    news = [r for r in _own(updated.body).returns if r.value is not None]
    if len(olds) != len(news):
        return None
    replacements = {id(n): cst.parse_statement(
        _returned(n.value, plan, numpy, ctx.column(o)) + "\n").body[0]
        for o, n in zip(olds, news)}
    return new.visit(_Returns(replacements))


def _docstring(statement):
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, (cst.SimpleString,
                                                     cst.ConcatenatedString)))


class _Returns(cst.CSTTransformer):
    def __init__(self, replacements):
        super().__init__()
        self.replacements = replacements

    def visit_FunctionDef(self, node):
        return self.depth_ok(node)

    def depth_ok(self, node):
        # the def itself is entered once; the defs inside it are not
        self.entered = getattr(self, "entered", 0) + 1
        return self.entered == 1

    def visit_Lambda(self, node):
        return False

    def visit_ClassDef(self, node):
        return False

    def leave_Return(self, original_node, updated_node):
        text = self.replacements.get(id(original_node))
        return updated_node if text is None else text
