"""Small libcst helpers the rules share: source text of a node, binding a
call's arguments to parameter names, building expressions from text."""
from __future__ import annotations

import libcst as cst

_EMPTY = cst.Module(body=[])

# Expressions that need no parentheses as the receiver of ``.attr`` or as an operand.
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString,
          cst.ConcatenatedString, cst.FormattedString, cst.Integer, cst.Float,
          cst.Imaginary, cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp,
          cst.SetComp, cst.DictComp, cst.GeneratorExp)


def code(node):
    """The source text of ``node`` (any node, in or out of a module)."""
    return _EMPTY.code_for_node(node)


def one_line(text, limit=100):
    """``text`` with its whitespace runs collapsed, cut at ``limit`` characters."""
    flat = " ".join(text.split()).replace("( ", "(").replace(", )", ")")
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def atom(node):
    """The text of ``node`` wrapped in parentheses unless it is an atom."""
    text = code(node)
    if isinstance(node, _ATOMS) or node.lpar:
        return text
    return f"({text})"


def expr(text):
    return cst.parse_expression(text)


class Unbindable(Exception):
    """A call's arguments cannot be matched to parameters statically
    (``*args``/``**kwargs``, a keyword the API does not have, too many)."""


def bind(call, params):
    """{parameter name: cst.Arg} for ``call`` against positional-or-keyword
    ``params`` (a sequence of names; names after a ``"*"`` are keyword only)."""
    positional = list(params[:params.index("*")]) if "*" in params else list(params)
    known = [p for p in params if p != "*"]
    bound = {}
    for k, arg in enumerate(call.args):
        if arg.star:
            raise Unbindable(f"{'*' * len(arg.star)}{code(arg.value)} can't be read statically")
        if arg.keyword is None:
            if k >= len(positional):
                raise Unbindable(f"more positional arguments than the API takes ({k + 1})")
            bound[positional[k]] = arg
        else:
            name = arg.keyword.value
            if name not in known:
                raise Unbindable(f"keyword {name}= that the API did not take")
            bound[name] = arg
    return bound


def value(bound, name, default=None):
    arg = bound.get(name)
    return default if arg is None else code(arg.value)


def call_text(func, positional=(), keywords=()):
    """``func(a, b, k=v)`` from texts; ``keywords`` is (name, text) pairs."""
    parts = list(positional) + [f"{k}={v}" for k, v in keywords]
    return f"{func}({', '.join(parts)})"


def root_name(node):
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def rewrite_call(call, func=None, rename=None, first=None):
    """Text of ``call`` with its callee replaced by the text ``func``, keywords
    renamed by ``rename`` ({old: new}) and the first argument's value replaced
    by the text ``first``; every argument keeps its own formatting."""
    args = []
    for k, arg in enumerate(call.args):
        if k == 0 and first is not None:
            arg = arg.with_changes(value=expr(first))
        if arg.keyword is not None and rename and arg.keyword.value in rename:
            arg = arg.with_changes(keyword=cst.Name(rename[arg.keyword.value]))
        args.append(arg)
    changes = {"args": args}
    if func is not None:
        changes["func"] = expr(func)
    return code(call.with_changes(**changes))


def nodes(node):
    """``node`` and every node below it, depth first."""
    yield node
    for child in node.children:
        yield from nodes(child)


def bindings(module):
    """``{name: [value, ...]}``: each binding of each name anywhere in ``module``,
    by its text (scopes not told apart: conservative), the value assigned where a
    plain ``name = value`` binds it, else None (a def, a parameter, a loop or
    ``with`` target, an augmented assignment, an unpacked target...)."""
    found = {}
    for n in nodes(module):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                if isinstance(t.target, cst.Name):
                    found.setdefault(t.target.value, []).append(n.value)
                else:
                    for name in nodes(t.target):
                        if isinstance(name, cst.Name):
                            found.setdefault(name.value, []).append(None)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.AsName, cst.Param,
                            cst.NamedExpr, cst.CompFor, cst.FunctionDef, cst.ClassDef)):
            target = getattr(n, "target", None) or getattr(n, "name", None)
            for name in nodes(target) if target is not None else ():
                if isinstance(name, cst.Name):
                    found.setdefault(name.value, []).append(None)
        elif isinstance(n, (cst.Global, cst.Nonlocal)):
            for item in n.names:
                found.setdefault(item.name.value, []).append(None)
    return found
