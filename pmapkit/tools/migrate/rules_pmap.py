"""pmap, translated at each site into the modern JAX it stands for:

    jax.pmap(f, "i", donate_argnums=(0,))
    → jax.jit(jax.shard_map(_per_device(f), mesh=jax.sharding.Mesh(jax.local_devices(), ("i",)),
                            in_specs=jax.P("i"), out_specs=jax.P("i"), check_vma=False),
              donate_argnums=(0,))

A mesh of one named axis over the local devices (or the ``devices=`` given),
specs read from ``in_axes``/``out_axes`` (``jax.P(None, "i")`` for axis 1,
``jax.P()`` for None), ``donate_argnums`` to ``jax.jit``, and ``_per_device``
(``written``) for pmap's per-device view: the body sees each mapped argument
without its device axis, as classic pmap's did (shard_map hands it a block of
one). ``check_vma=False``: classic pmap had no varying-axes check (loop carries
start from constants). ``static_broadcasted_argnums`` become ``jax.jit``'s
``static_argnums``, taken out before the shard_map and handed back to the body.
A decorator becomes the stack of the three (``@jax.jit``,
``@functools.partial(jax.shard_map, ...)``, ``@_per_device``); on a plain def
(``pmap_bodies``) the first two, the def's own body taking the mapped axis
off and back, and ``name = jax.pmap(lambda ...)`` such a named def. The
site that is ``jax.jit``'s one argument is not jitted again.

Two stacked pmap decorators, or ``jax.pmap(jax.pmap(f))`` inline (in/out_axes
0, no statics, donation or ``devices=``, two axis names), become one shard_map
over a 2-D mesh (outer axis, inner axis) with ``_per_device`` twice; the
mesh's shape is the argument's two leading sizes, so ``_first_devices``
(``written``) cuts the local devices to it when ``jax.jit`` traces. A
pmap-decorated def called in a pmapped body, as ``nested_pmaps`` plans it,
becomes a shard_map over the inner axis in one over the outer axis of such a
mesh. A single site goes through ``_first_devices`` too where the file maps a
size written as other than the device count (``mapped_sizes``). Which sites
are nested, stacked or written as named defs is planned before the rewrite
(``pmap_plan``, the family's ``plan`` hook).

What the source cannot say stays ``jax.pmap`` (JAX 0.10 runs it) and the
report says why: ``in_axes`` computed at run time, ``backend=``/``axis_size=``, ``jax.pmap`` or
``partial(jax.pmap, ...)`` passed as a value. Any other pmap of a pmap is
left with a comment saying what stopped it (JAX 0.10's own pmap refuses one
too), and so is a negative axis (its spec needs the argument's rank; JAX
0.10's pmap refuses a negative in_axes); ``global_arg_shapes=`` is gone.

Not translated, and failing loudly rather than computing something else: a
call with keyword arguments (``jax.shard_map`` takes positional ones), inputs
committed to devices outside the mesh (``jax.jit`` refuses them), and, in a
file that shows no mapped size of its own (an argument made elsewhere), a mapped axis whose size is not the
number of devices of the mesh (classic pmap ran n < device count on the first
n devices; shard_map says "not evenly divisible", or the squeeze of a block
larger than one fails): pass ``devices=jax.local_devices()[:n]`` to the
classic pmap first, or cut the mesh by hand.
"""
from __future__ import annotations

import dataclasses

import libcst as cst

from pmapkit.tools.migrate import helpers, pmap_bodies
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, KeepPmap, LeaveAsIs
from pmapkit.tools.migrate.nested_pmaps import Unplanned

PMAP = "jax.pmap"
PARTIAL = ("functools.partial",)
_PARAMS = ("fun", "axis_name", "*", "in_axes", "out_axes", "static_broadcasted_argnums",
           "devices", "backend", "axis_size", "donate_argnums", "global_arg_shapes")
_UNSUPPORTED = {"backend": "backend= (the devices of a platform) is kept for jax.pmap",
                "axis_size": "axis_size= (a mapped size across processes) is kept for jax.pmap"}
NESTED = ("a pmap of a pmap: JAX 0.10 has no nested pmap (its jax.pmap refuses one too); "
          "write one jax.shard_map over a 2-D mesh with an axis for each")
# The axis name of a pmap given none (its body names no axis; a vmap inside it might).
DEFAULT_AXIS = ("devices", "pmap_devices", "pmap_axis")


def _check(bound):
    """KeepPmap (or LeaveAsIs) unless these pmap arguments can be translated."""
    for name, what in _UNSUPPORTED.items():
        arg = bound.get(name)
        if arg is not None and sx.code(arg.value) not in ("()", "None", "[]"):
            raise KeepPmap(what)
    shapes = bound.get("global_arg_shapes")
    if shapes is not None and sx.code(shapes.value) not in ("()", "None", "[]"):
        raise LeaveAsIs("global_arg_shapes= is gone from jax.pmap (JAX 0.10 has none); drop it: "
                        "a pmap takes each process's local slice")


def _bind(call, params):
    try:
        return sx.bind(call, params)
    except sx.Unbindable as exc:
        raise KeepPmap(str(exc)) from None


# -- reading the site -------------------------------------------------------------------

class _Axes:
    """An ``in_axes``/``out_axes`` tree read from the source: ints ≥ 0, None,
    tuples/lists, dicts with literal keys."""

    def __init__(self, node, what):
        self.what = what
        self.tree = self._read(node)

    def _read(self, node):
        if isinstance(node, cst.Integer):
            return int(node.value, 0)
        if isinstance(node, cst.Name) and node.value == "None":
            return None
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            raise LeaveAsIs(f"a negative {self.what} needs the argument's rank, which the source "
                            "does not say: give the axis counted from the front (JAX 0.10's "
                            "jax.pmap refuses a negative in_axes)")
        if isinstance(node, (cst.Tuple, cst.List)):
            if any(isinstance(e, cst.StarredElement) for e in node.elements):
                raise KeepPmap(f"{self.what} with a starred entry is read at run time: "
                               "kept for jax.pmap")
            return tuple(self._read(e.value) for e in node.elements)
        if isinstance(node, cst.Dict):
            out = {}
            for element in node.elements:
                if not isinstance(element, cst.DictElement) or not isinstance(
                        element.key, (cst.SimpleString, cst.Integer)):
                    raise KeepPmap(f"{self.what} with keys computed at run time: "
                                   "kept for jax.pmap")
                out[sx.code(element.key)] = self._read(element.value)
            return _DictAxes(out)
        raise KeepPmap(f"{self.what}={sx.code(node)} is computed at run time; migrate "
                       "writes its specs from a literal: kept for jax.pmap")


class _DictAxes(dict):
    """A dict of axes, its keys kept as source text."""


def _text(tree, leaf):
    """Source text of an axes tree with each int/None leaf written by ``leaf``."""
    if isinstance(tree, tuple):
        inner = ", ".join(_text(t, leaf) for t in tree)
        return f"({inner},)" if len(tree) == 1 else f"({inner})"
    if isinstance(tree, _DictAxes):
        return "{" + ", ".join(f"{k}: {_text(v, leaf)}" for k, v in tree.items()) + "}"
    return leaf(tree)


def _spec(name):
    def leaf(axis):
        if axis is None:
            return "jax.P()"
        return f"jax.P({'None, ' * axis}{name})"
    return leaf


def _argnums(bound, key):
    """The literal positions of ``key`` (an int or a tuple/list of ints), or ()."""
    arg = bound.get(key)
    if arg is None or sx.code(arg.value) in ("()", "None", "[]"):
        return ()
    node = arg.value
    items = [node] if isinstance(node, cst.Integer) else (
        [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List)) else None)
    if items is None or not all(isinstance(i, cst.Integer) for i in items):
        raise KeepPmap(f"{key}={sx.code(node)} is computed at run time: kept for jax.pmap")
    return tuple(int(i.value, 0) for i in items)


def _tuple_text(numbers):
    return f"({numbers[0]},)" if len(numbers) == 1 else f"({', '.join(map(str, numbers))})"


def _literal(node):
    """Whether ``node`` is a literal number or a tuple of literals (no name, no call)."""
    if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _literal(node.expression)
    return isinstance(node, cst.Tuple) and all(_literal(e.value) for e in node.elements)


def _axis_name(bound):
    """The axis name's source text, or None when the pmap names none (or a literal
    that is not a string: a mesh axis of JAX 0.10 is named by a string, and no
    collective of JAX 0.10 can name a number or a tuple, so the site gets a
    fresh name of its own)."""
    name = bound.get("axis_name")
    if name is None or sx.code(name.value) == "None":
        return None
    if isinstance(name.value, (cst.SimpleString, cst.ConcatenatedString, cst.Name,
                               cst.Attribute)):
        return sx.code(name.value)
    if _literal(name.value):
        return None
    raise KeepPmap(f"axis_name={sx.code(name.value)} is an expression whose value is known "
                   "only at run time: kept for jax.pmap")


class Site:
    """One pmap call site, read: the texts its translation is written from."""

    def __init__(self, ctx, bound, name_given=None, node=None):
        self.name = (name_given or _axis_name(bound)
                     or f'"{ctx.free_axis_name(DEFAULT_AXIS)}"')
        in_axes = _Axes(bound["in_axes"].value, "in_axes").tree if "in_axes" in bound else 0
        out_axes = _Axes(bound["out_axes"].value, "out_axes").tree if "out_axes" in bound else 0
        self.static = _argnums(bound, "static_broadcasted_argnums")
        self.donate = _argnums(bound, "donate_argnums")
        if isinstance(in_axes, tuple) and self.static:
            # Classic pmap read in_axes by position among all the positional arguments,
            # the static ones' entries unread: it may cover only those before a trailing
            # static argument.
            count = max(len(in_axes), max(self.static) + 1)
            dynamic = [k for k in range(count) if k not in self.static]
            if dynamic and dynamic[-1] >= len(in_axes):
                raise KeepPmap(f"in_axes has {len(in_axes)} entries, fewer than the "
                               "positional arguments it must cover: kept for jax.pmap")
            in_axes = tuple(in_axes[k] for k in dynamic)
        self.in_axes, self.out_axes = in_axes, out_axes
        devices = bound.get("devices")
        # the mesh is cut to the mapped size when jax.jit traces (mapped_sizes), but
        # for devices= given: classic pmap required the mapped size to be their number
        self.cut = False
        size = ctx.plans["pmap"].literal_sizes.get(id(node))
        if size is not None:        # classic pmap ran it on the first `size` devices
            self.mesh = f"jax.sharding.Mesh(jax.local_devices()[:{size}], ({self.name},))"
        elif devices is None or sx.code(devices.value) == "None":
            self.mesh = f"jax.sharding.Mesh(jax.local_devices(), ({self.name},))"
            if ctx.plans["pmap"].meshes_follow_arguments:
                self.cut = True
                ctx.need_helper(helpers.FIRST_DEVICES)
        else:
            self.mesh = f"jax.sharding.Mesh({sx.code(devices.value)}, ({self.name},))"
        ctx.need_import("jax")
        self.ctx = ctx
        self.jitted = False     # the site is the one argument of the user's jax.jit

    def _mapped(self, body, options):
        """``jax.shard_map(body, options...)`` (or through ``_first_devices``)."""
        if not self.cut:
            return sx.call_text("jax.shard_map", [body] + options)
        return sx.call_text("_first_devices", ["jax.shard_map", body] + options)

    def _opening(self):
        """(the call opened, what comes before the body) of a shard_map written over
        several lines."""
        return ("_first_devices(", "jax.shard_map, ") if self.cut else ("jax.shard_map(", "")

    def per_device_options(self, static=None):
        options = []
        if self.in_axes != 0:
            options.append(f"in_axes={_text(self.in_axes, repr)}")
        if self.out_axes != 0:
            options.append(f"out_axes={_text(self.out_axes, repr)}")
        if static:
            options.append(f"static={static}")
        return options

    def spec_options(self):
        return [f"in_specs={_text(self.in_axes, _spec(self.name))}",
                f"out_specs={_text(self.out_axes, _spec(self.name))}"]

    def shard_map_options(self, mesh=None):
        return [f"mesh={mesh or self.mesh}", *self.spec_options(), "check_vma=False"]

    def jit_options(self):
        options = []
        if self.static:
            options.append(f"static_argnums={_tuple_text(self.static)}")
        if self.donate:
            options.append(f"donate_argnums={_tuple_text(self.donate)}")
        return options

    def expression(self, fun, indent=None, column=0, body=None):
        """The translation of ``jax.pmap(fun, ...)`` (``fun``: source text), on one
        line, or over several (``indent``: the statement's) where one would pass
        ``WIDTH`` columns from ``column``; ``body``: the shard_map's body written
        in place (``inline_body``), else ``_per_device(fun)``."""
        if self.static:
            return self._with_statics(fun, indent, column)
        if body is None:
            self.ctx.need_helper(helpers.PER_DEVICE)
            body = sx.call_text("_per_device", [fun] + self.per_device_options())
        split, body = body, "".join(body) if isinstance(body, tuple) else body

        def placed(at):
            """The body at ``at`` (its line's indentation), broken once if too long."""
            head, first = self._opening()
            if not isinstance(split, tuple) or len(at) + len(first) + len(body) + 1 <= WIDTH:
                return body
            return f"{split[0]}\n{at}    {split[1]}"
        mapped = self._mapped(body, self.shard_map_options())
        # jax.jit(jax.pmap(f)): the user's jax.jit compiles it already (no jit of a jit)
        jitted = self.jitted and not self.jit_options()
        line = mapped if jitted else sx.call_text("jax.jit", [mapped] + self.jit_options())
        if indent is None or column + len(line) <= WIDTH or "\n" in fun:
            return line
        step = indent + "    "
        head, first = self._opening()
        if jitted:
            return (f"{head}\n{step}{first}{placed(step)},\n"
                    f"{_fill(self.shard_map_options(), step)})")
        if not self.jit_options():
            return (f"jax.jit({head}\n{step}{first}{placed(step)},\n"
                    f"{_fill(self.shard_map_options(), step)}))")
        inner = step + "    "
        return (f"jax.jit(\n{step}{head}\n{inner}{first}{placed(inner)},\n"
                f"{_fill(self.shard_map_options(), inner)}),\n"
                f"{_fill(self.jit_options(), step)})")

    def _with_statics(self, fun, indent=None, column=0):
        # jax.jit passes the static arguments as they are: they go round the shard_map
        # (which maps arrays only) and are handed back to the body.
        self.ctx.need_helper(helpers.PER_DEVICE)
        statics = ", ".join(f"({k}, args[{k}])" for k in self.static)
        body = sx.call_text("_per_device", ["fn"] + self.per_device_options(
            f"({statics},)" if len(self.static) == 1 else f"({statics})"))
        dynamic = f"*[x for k, x in enumerate(args) if k not in {_tuple_text(self.static)}]"
        mapped = self._mapped(body, self.shard_map_options("mesh"))
        jitted = sx.call_text("jax.jit", [f"lambda *args: {mapped}({dynamic})"]
                              + self.jit_options())
        line = f"(lambda fn, mesh: {jitted})({fun}, {self.mesh})"
        if indent is None or column + len(line) <= WIDTH or "\n" in fun:
            return line
        step, inner = indent + "    ", indent + "        "
        head, first = self._opening()
        return (f"(lambda fn, mesh: jax.jit(\n{step}lambda *args: {head}\n"
                f"{inner}{first}{body},\n{_fill(self.shard_map_options('mesh'), inner)},\n"
                f"{step})({dynamic}),\n{_fill(self.jit_options(), step)}))(\n"
                f"{_fill([fun, self.mesh], step)})")

    def decorators(self, indent="", body_unmaps=False):
        """The decorators standing for ``@partial(jax.pmap, ...)`` (texts, outermost
        first; ``indent``: the function's; ``body_unmaps``: the def's own body takes
        the mapped axis off, ``pmap_bodies``)."""
        if self.static:
            return [f"lambda fun: {self.expression('fun', indent, len(indent) + 13)}"]
        return [self.jit_decorator(), self.shard_map_decorator(indent)] + (
            [] if body_unmaps else [self.per_device_decorator()])

    def shard_map_decorator(self, indent=""):
        """``functools.partial(jax.shard_map, ...)`` (text) over lines of ``indent``."""
        head = ("functools.partial(_first_devices, jax.shard_map, " if self.cut
                else "functools.partial(jax.shard_map, ")
        return head + _fill(self.shard_map_options(), indent + " " * len("@functools.partial("),
                            first=len(indent) + len(head) + 1).lstrip() + ")"

    def jit_decorator(self):
        jit = self.jit_options()
        return "jax.jit" if not jit else sx.call_text("functools.partial", ["jax.jit"] + jit)

    def per_device_decorator(self):
        self.ctx.need_helper(helpers.PER_DEVICE)
        options = self.per_device_options()
        return ("_per_device" if not options
                else sx.call_text("functools.partial", ["_per_device"] + options))


WIDTH = 99


def _fill(parts, indent, first=None):
    """``parts`` joined by ", " in lines of at most ``WIDTH`` columns, each starting
    with ``indent`` (the first at column ``first`` if given)."""
    lines, line = [], ""
    at = len(indent) if first is None else first
    for part in parts:
        if line and at + len(line) + len(part) + 2 > WIDTH:
            lines.append(line + ",")
            line, at = "", len(indent)
        line = f"{line}, {part}" if line else part
    lines.append(line)
    return "\n".join(indent + text for text in lines)


# -- the rules ---------------------------------------------------------------------------

def _site(ctx, original, bound):
    if ctx.plans["pmap"].is_nested(original):
        raise LeaveAsIs(ctx.plans["pmap"].nested_why(original))
    _check(bound)
    return Site(ctx, bound, node=original)


def pmap_call(ctx, original, updated):
    """``jax.pmap(f, ...)``."""
    bound = _bind(updated, _PARAMS)
    if "fun" not in bound:
        raise KeepPmap("a pmap without its function (pmap(axis_name=...)) is kept")
    outer = ctx.plans["pmap"].stacked_calls_inner.get(id(original))
    if outer is not None:
        # the inner of jax.pmap(jax.pmap(f)): the outer's translation stands for both
        _stacked_names(ctx, [_bind(outer, _PARAMS), bound])
        return None
    if id(original) in ctx.plans["pmap"].stacked_calls:
        return stacked_call(ctx, original, bound)
    site = _site(ctx, original, bound)
    site.jitted = id(original) in ctx.plans["pmap"].jitted_calls
    name = ctx.plans["pmap"].assigned_calls.get(id(original))
    lam = _as_lambda(ctx, bound["fun"].value, name)
    if name is not None and lam is not None:
        # name = jax.pmap(lambda ...: ...) or jax.pmap(f), f a def of the file: a named
        # def (leave_SimpleStatementLine)
        text = None
        if site.static:
            static = pmap_bodies.static_plan(lam, site)
            if static is not None:
                ctx.need_import("functools")
                static = dataclasses.replace(static, decorator=site.shard_map_decorator("    "))
                text = pmap_bodies.named_def(name, lam, [site.jit_decorator()], static.plan,
                                             ctx.numpy_name, static)
        else:
            plan = pmap_bodies.plan(lam, site)
            if plan is not None:
                ctx.need_import("functools")
                text = pmap_bodies.named_def(name, lam, site.decorators(body_unmaps=True), plan,
                                             ctx.numpy_name)
        if text is not None:
            ctx.plans["pmap"].named_defs[id(original)] = text
            return name
    return site.expression(sx.code(bound["fun"].value), ctx.indent(), ctx.column(original),
                           inline_body(ctx, original, bound["fun"].value, site))


def _stable_callee(node):
    """Whether ``node`` is a name or a dotted name (``f``, ``jnp.dot``,
    ``solver.update``): read when the body is traced, it is what it was when
    the pmap was made if the pmap is called at once."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _flat_axes(axes):
    """Whether ``axes`` is an axis, or a tuple of axes and Nones (one per argument)."""
    if isinstance(axes, tuple):
        return all(a is None or isinstance(a, int) for a in axes)
    return isinstance(axes, int)


def inline_body(ctx, original, fun, site):
    """The shard_map body of ``jax.pmap(fun, ...)`` written in place, as an
    engineer writes it: a lambda taking the mapped axis off its arguments and
    putting it back on what ``fun`` returns (what ``_per_device`` does, with no
    helper), as (its text up to where a long line breaks, the rest); None where
    the site needs ``_per_device``.

    ``fun`` is read each time the body is traced: it must be a lambda without
    defaults (the same function whenever it is made), or a name or dotted name
    of a pmap called where it is made (``jax.pmap(f)(x)``: traced there, so
    ``f`` is what it was). The axes are an axis per argument or one for all,
    and one axis (or None) for the whole output."""
    if site.static or not _flat_axes(site.in_axes) or not (
            site.out_axes is None or isinstance(site.out_axes, int)):
        return None
    if isinstance(fun, cst.Lambda):
        params = fun.params
        if any(p.default is not None for p in (*params.params, *params.kwonly_params,
                                                *params.posonly_params)):
            return None
        callee = f"({sx.code(fun)})"
    elif _stable_callee(fun) and id(original) in ctx.plans["pmap"].called_at_once:
        callee = sx.code(fun)
    else:
        return None
    numpy = ctx.numpy_name
    taken = {n.value for n in sx.nodes(fun) if isinstance(n, cst.Name)} | {
        "jax", numpy.split(".")[0]}
    leaf = next(n for n in ("v", "leaf", "block", "_v") if n not in taken)

    def squeezed(axis, arg):
        return f"jax.tree.map(lambda {leaf}: {numpy}.squeeze({leaf}, {axis}), {arg})"

    if isinstance(site.in_axes, tuple):
        names = [n for n in (f"x{k}" for k in range(len(taken) + len(site.in_axes) + 1))
                 if n not in taken][:len(site.in_axes)]
        args = [a if axis is None else squeezed(axis, a) for axis, a in zip(site.in_axes, names)]
        params, call = ", ".join(names), f"{callee}({', '.join(args)})"
    else:
        name = next(n for n in ("args", "xs", "arrays", "_args") if n not in taken)
        params, call = f"*{name}", f"{callee}(*{squeezed(site.in_axes, name)})"
    if site.out_axes is None:
        return (f"lambda {params}: {callee}(", call[len(callee) + 1:])
    return (f"lambda {params}: jax.tree.map(",
            f"lambda {leaf}: {numpy}.expand_dims({leaf}, {site.out_axes}), {call})")


def _as_lambda(ctx, fun, name):
    """``fun`` as a lambda of its parameters: itself, or for the name of a def of
    the file with plain parameters, ``lambda a, b: f(a, b)``; else None."""
    if isinstance(fun, cst.Lambda):
        return fun
    if not isinstance(fun, cst.Name) or fun.value == name:
        return None
    fn = ctx.function_named(fun.value)
    # the named def reads the name when called: the def, never rebound
    if fn is None or fn.decorators or not pmap_bodies.plain_params(fn.params) or (
            fun.value not in ctx.plans["pmap"].bound_once):
        return None
    params = ", ".join(pmap_bodies.plain_params(fn.params))
    return cst.parse_expression(f"lambda {params}: {fun.value}({params})")


def partial_pmap(ctx, original, updated):
    """``functools.partial(jax.pmap, ...)`` as a value: None unless it is one."""
    if not updated.args or updated.args[0].keyword or updated.args[0].star:
        return None
    if ctx.qualname(original.args[0].value) != PMAP:
        return None
    raise KeepPmap("functools.partial(jax.pmap, ...) as a value: the pmap is made where it "
                   "is called, which migrate does not follow")


def decorator(ctx, original, updated, fn=None):
    """The decorators (texts) standing for a pmap decorator (``@jax.pmap``,
    ``@functools.partial(jax.pmap, ...)``) of the def ``fn``: where its body can
    take the mapped axis off itself (``pmap_bodies``), no ``_per_device``."""
    site = _site(ctx, original, _decorator_bound(updated))
    if site.static and fn is not None:
        # a def of all the parameters, jitted with the statics, whose body is a def of
        # the mapped ones (pmap_bodies.rewrite_static)
        static = pmap_bodies.static_plan(fn, site)
        if static is not None:
            ctx.plans["pmap"].static_plans[id(fn)] = (site, static)
            return [site.jit_decorator()]
    plan = pmap_bodies.plan(fn, site) if fn is not None else None
    if plan is not None:
        ctx.plans["pmap"].inline_plans[id(fn)] = plan
    return site.decorators(ctx.indent(), body_unmaps=plan is not None)


def _decorator_bound(node):
    if isinstance(node, cst.Call):
        rest = node.with_changes(args=[cst.Arg(cst.Name("f"))] + list(node.args[1:]))
        return _bind(rest, _PARAMS)
    return {}


STACKED = ("stacked pmap decorators are translated with in_axes/out_axes 0 on both, no statics, "
           "donation or devices=, and two axis names: ")


def _stacked_names(ctx, bounds):
    """The two axis names (source texts) of stacked pmaps, outer first (a name of
    its own for a pmap given none), or ``LeaveAsIs`` unless the stack is what the
    2-D translation takes."""
    names = []
    for bound in bounds:
        _check(bound)
        if any(sx.code(bound[key].value) not in (("0",) if key.endswith("axes") else ("None",))
               for key in ("in_axes", "out_axes", "devices") if key in bound) or any(
                _argnums(bound, key) for key in ("static_broadcasted_argnums", "donate_argnums")):
            raise LeaveAsIs(STACKED + NESTED)
        names.append(_axis_name(bound))
    for k, name in enumerate(names):
        if name is None:
            names[k] = '"{}"'.format(ctx.free_axis_name(
                tuple(n for n in DEFAULT_AXIS if f'"{n}"' not in names)))
    if names[0] == names[1]:
        raise LeaveAsIs(STACKED + NESTED)
    return names


def _stacked_options(ctx, names):
    # The 2-D mesh's shape is the argument's two leading sizes, known only when
    # jax.jit traces: _first_devices cuts the local devices to it then.
    ctx.need_import("jax")
    ctx.need_import("numpy")
    ctx.need_helper(helpers.PER_DEVICE)
    ctx.need_helper(helpers.FIRST_DEVICES)
    spec = f"jax.P({names[0]}, {names[1]})"
    return [_mesh_2d(*names), f"in_specs={spec}", f"out_specs={spec}", "check_vma=False"]


def _mesh_2d(outer, inner):
    # its shape is cut by _first_devices when jax.jit traces
    return (f"mesh=jax.sharding.Mesh(numpy.reshape(jax.local_devices(), (-1, 1)), "
            f"({outer}, {inner}))")


def stacked_decorators(ctx, outer, inner):
    """The decorators (texts) standing for two stacked pmap decorators: one
    shard_map over a 2-D mesh (the outer's axis, the inner's), the body given each
    argument without both leading axes (``_per_device`` twice), as classic pmap
    of a pmap gave it."""
    if ctx.plans["pmap"].is_nested(outer):       # its body makes or calls a pmap
        raise LeaveAsIs(ctx.plans["pmap"].nested_why(outer))
    names = _stacked_names(ctx, [_decorator_bound(node) for node in (outer, inner)])
    options = ["_first_devices", "jax.shard_map", *_stacked_options(ctx, names)]
    indent = ctx.indent()
    return ["jax.jit", "functools.partial(" + _fill(
        options, indent + " " * len("@functools.partial("),
        first=len(indent) + len("@functools.partial(")).lstrip() + ")",
        "_per_device", "_per_device"]


def stacked_call(ctx, original, bound):
    """``jax.pmap(jax.pmap(f, axis_name=b), axis_name=a)``: the stacked decorators'
    translation as one expression."""
    inner = _bind(bound["fun"].value, _PARAMS)
    names = _stacked_names(ctx, [bound, inner])
    options = _stacked_options(ctx, names)
    body = f"_per_device(_per_device({sx.code(inner['fun'].value)}))"
    line = f"jax.jit(_first_devices(jax.shard_map, {body}, {', '.join(options)}))"
    if ctx.column(original) + len(line) <= WIDTH or "\n" in body:
        return line
    step = ctx.indent() + "    "
    return f"jax.jit(_first_devices(\n{step}jax.shard_map, {body},\n{_fill(options, step)}))"


# -- a pmap-decorated def called in a pmap-decorated def's body (nested_pmaps) -----------

def nest_axis_names(ctx, nest):
    """(outer axis, inner axis), source texts, for a planned nest; raises
    ``Unplanned`` (before anything of it is rewritten) for what its translation
    does not take: statics, ``devices=``, an inner's donation, inner pmaps naming
    different axes (and ``LeaveAsIs``/``KeepPmap`` as any pmap site)."""
    outer = _decorator_bound(nest.decorator)
    inners = [_decorator_bound(each.decorator) for each in nest.inners]
    for bound, what in [(outer, "the outer pmap")] + [(b, "an inner pmap") for b in inners]:
        _check(bound)
        for key in ("in_axes", "out_axes"):
            if key in bound:
                _Axes(bound[key].value, key)
        if _argnums(bound, "static_broadcasted_argnums") or (
                "devices" in bound and sx.code(bound["devices"].value) != "None"):
            raise Unplanned(f"{what} has statics or devices=")
    if any(_argnums(b, "donate_argnums") for b in inners):
        raise Unplanned("an inner pmap donates (its buffers are the outer's)")
    names = {_axis_name(b) for b in inners}
    if len(names) != 1:
        raise Unplanned("the inner pmaps name different axes")
    outer_name = _axis_name(outer) or f'"{ctx.free_axis_name(DEFAULT_AXIS)}"'
    inner_name = names.pop() or '"{}"'.format(ctx.free_axis_name(
        tuple(n for n in DEFAULT_AXIS if f'"{n}"' != outer_name)))
    if inner_name == outer_name:
        raise Unplanned("the inner and outer pmaps name one axis")
    return outer_name, inner_name


def nest_outer_decorators(ctx, nest):
    """The decorators (texts) standing for the outer pmap decorator of a planned
    nest: a shard_map manual over the outer axis of a 2-D mesh whose inner axis
    takes the devices left (``_first_devices``)."""
    outer, inner = nest.axis_names
    site = Site(ctx, _decorator_bound(nest.decorator), outer)
    ctx.need_import("numpy")
    ctx.need_helper(helpers.FIRST_DEVICES)
    options = ["_first_devices", "jax.shard_map", _mesh_2d(outer, inner), *site.spec_options(),
               f"axis_names={{{outer}}}", "check_vma=False"]
    indent = ctx.indent()
    return [site.jit_decorator(),
            "functools.partial(" + _fill(options, indent + " " * len("@functools.partial("),
                                         first=len(indent) + len("@functools.partial(")).lstrip()
            + ")",
            site.per_device_decorator()]


def nest_inner_decorators(ctx, nest, inner):
    """The decorators (texts) standing for an inner pmap decorator of a planned nest:
    a shard_map manual over the inner axis, on the mesh of the shard_map it is traced
    in; the values the def reads from the outer body are its last parameters, mapped
    as None."""
    name = nest.axis_names[1]
    site = Site(ctx, _decorator_bound(inner.decorator), name)
    if inner.closure:
        count = len(inner.function.params.params)
        given = site.in_axes if isinstance(site.in_axes, tuple) else (site.in_axes,) * count
        site.in_axes = tuple(given) + (None,) * len(inner.closure)
    head = "functools.partial(jax.shard_map, "
    options = [*site.spec_options(), f"axis_names={{{name}}}", "check_vma=False"]
    indent = ctx.indent()
    return [head + _fill(options, indent + " " * len("@functools.partial("),
                         first=len(indent) + len(head) + 1).lstrip() + ")",
            site.per_device_decorator()]


def family():
    return Family("pmap", calls={PMAP: pmap_call})
