"""What a migrated file imports, and the helpers after its imports: classic
imports nothing reads any more dropped, the imports the rewrites need added,
the file's own name for numpy kept, each helper written in once."""
from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider, ScopeProvider

from pmapkit.tools.migrate import leftovers
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.report import Rewrite


def _walk(node, kind):
    return [n for n in sx.nodes(node) if isinstance(n, kind)]


def _under(q, names):
    """Whether ``q`` is one of ``names`` or a dotted member of one."""
    return any(q == n or q.startswith(n + ".") for n in names)


def with_helpers(module, new):
    """``module`` with the helpers ``new`` written in after its imports."""
    if not new:
        return module
    body = list(module.body)
    at = _after_imports(body)
    added = []
    for helper in new:
        parsed = cst.parse_module(helper.source)
        statements = list(parsed.body)
        if helper.call_after:
            statements.append(cst.parse_statement(f"{helper.name}()\n").with_changes(
                leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
        statements[0] = statements[0].with_changes(
            leading_lines=[cst.EmptyLine(), cst.EmptyLine()]
            + [line for line in (*parsed.header, *statements[0].leading_lines) if line.comment])
        added.extend(statements)
    if at < len(body):
        body[at] = body[at].with_changes(
            leading_lines=[cst.EmptyLine(), cst.EmptyLine()]
            + [line for line in body[at].leading_lines if line.comment])
    return module.with_changes(body=body[:at] + added + body[at:])


def _is_import_line(statement):
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)


def _is_docstring(statement):
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _after_imports(body):
    """Index after the module's leading docstring and import block."""
    at = 0
    if body and _is_docstring(body[0]):
        at = 1
    last = at
    for k in range(at, len(body)):
        if _is_import_line(body[k]):
            last = k + 1
        else:
            break
    return last


def numpy_name(module):
    """What the file calls ``jax.numpy`` at its top level (``jnp``), else ``jax.numpy``."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for module_, obj, asname, q in _import_aliases(statement):
                if q == "jax.numpy" and (asname or obj is None):
                    return asname or "jax.numpy"
    return "jax.numpy"


def _import_aliases(module):
    """(module, obj, asname, qualified) for each import alias of ``module``."""
    out = []
    for statement in _walk(module, (cst.Import, cst.ImportFrom)):
        if isinstance(statement, cst.Import):
            for alias in statement.names:
                name = sx.code(alias.name)
                asname = sx.code(alias.asname.name) if alias.asname else None
                out.append((name, None, asname, name))
        elif not statement.relative and statement.module is not None and not isinstance(
                statement.names, cst.ImportStar):
            base = sx.code(statement.module)
            for alias in statement.names:
                name = sx.code(alias.name)
                asname = sx.code(alias.asname.name) if alias.asname else None
                out.append((base, name, asname, f"{base}.{name}"))
    return out


class _DropDottedImports(cst.CSTTransformer):
    """Removes ``import a.b.c`` (no ``as``) of the given dotted modules."""

    def __init__(self, modules):
        super().__init__()
        self.modules = modules

    def leave_Import(self, original_node, updated_node):
        names = [a for a in updated_node.names
                 if a.asname is not None or sx.code(a.name) not in self.modules]
        if not names:
            return cst.RemoveFromParent()
        if len(names) == len(updated_node.names):
            return updated_node
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=names)


class _ImportLines(cst.CSTVisitor):
    """The line of each imported qualified name (``from a import b``: ``a.b``)."""
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self):
        super().__init__()
        self.lines = {}

    def visit_ImportFrom(self, node):
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        line = self.get_metadata(PositionProvider, node).start.line
        for alias in node.names:
            self.lines.setdefault(f"{sx.code(node.module)}.{sx.code(alias.name)}", line)

    def visit_Import(self, node):
        line = self.get_metadata(PositionProvider, node).start.line
        for alias in node.names:
            self.lines.setdefault(sx.code(alias.name), line)


def unread_classic_imports(tree):
    """``{qualified name: line}`` of the imports of ``tree`` that bind a name this JAX
    lacks which nothing in the file reads (the cookbook's ``from jax._src.lib import
    xla_bridge``): each did nothing but bind the name."""
    found = [(module, obj, asname, q) for module, obj, asname, q in _import_aliases(tree)
             if (obj is not None or asname is not None) and leftovers.classic(q)]
    if not found:
        return {}
    visitor = _ImportLines()
    cst.MetadataWrapper(tree).visit(visitor)
    context = CodemodContext()
    for module, obj, asname, _q in found:
        RemoveImportsVisitor.remove_unused_import(context, module, obj, asname)
    kept = {q for _m, _o, _a, q in _import_aliases(
        RemoveImportsVisitor(context).transform_module(tree))}
    return {q: visitor.lines.get(q, 0) for _m, _o, _a, q in found if q not in kept}


def drop_imports(new, unread, report):
    """The imports ``_unread_classic_imports`` found and no rule rewrote (a moved
    name's import is the rule's), dropped as rewrites."""
    context = CodemodContext()
    dropped = set()
    for module, obj, asname, q in _import_aliases(new):
        if q in unread and (obj is not None or asname is not None):
            RemoveImportsVisitor.remove_unused_import(context, module, obj, asname)
            dropped.add(q)
    for q in sorted(dropped, key=unread.get):
        report.rewrites.append(Rewrite(unread[q], "classic", f"import {q}",
                                       f"(dropped: never read; {leftovers.classic(q)[1]})"))
    return RemoveImportsVisitor(context).transform_module(new)


class _Renamed(cst.CSTTransformer):
    """Every ``Name`` ``old`` renamed ``new``."""

    def __init__(self, old, new):
        super().__init__()
        self.old, self.new = old, new

    def visit_Import(self, node):
        return False

    def visit_ImportFrom(self, node):
        return False

    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value=self.new) if updated_node.value == self.old \
            else updated_node

    def leave_Attribute(self, original_node, updated_node):     # x.numpy stays
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node, updated_node):           # f(numpy=...) stays
        return updated_node.with_changes(keyword=original_node.keyword)


def names_outside_imports(node):
    """The names ``node`` reads or binds (a ``Name`` not an attribute's or a
    keyword's), but those of its import statements."""
    if isinstance(node, (cst.Import, cst.ImportFrom)):
        return set()
    found = {node.value} if isinstance(node, cst.Name) else set()
    for child in node.children:
        if not ((isinstance(node, cst.Attribute) and child is node.attr)
                or (isinstance(node, cst.Arg) and child is node.keyword)):
            found |= names_outside_imports(child)
    return found


def _own_numpy_name(new, migrator):
    """``new`` written with the file's own name for numpy (``np``) where the
    rewrites said ``numpy`` and the file binds no ``numpy`` of its own; then
    ``import numpy`` is added only if a helper needs it."""
    if "numpy" not in migrator.imports:
        return new
    names = {asname for module, obj, asname, q in _import_aliases(new)
             if q == "numpy" and asname}
    if len(names) != 1 or migrator.original_names & {"numpy"}:
        return new
    new = new.visit(_Renamed("numpy", names.pop()))
    if not any("numpy" in h.imports for h in migrator.new_helpers):
        migrator.imports.discard("numpy")
    return new


class _Dedented(cst.CSTTransformer):
    """Every continuation line ``by`` columns further left (where it has them)."""

    def __init__(self, by):
        super().__init__()
        self.by = by

    def leave_ParenthesizedWhitespace(self, original_node, updated_node):
        indent = updated_node.last_line.value
        if len(indent) < self.by or indent[-self.by:].strip():
            return updated_node
        return updated_node.with_changes(last_line=cst.SimpleWhitespace(indent[:-self.by]))


class _PartialRenamed(cst.CSTTransformer):
    """Every ``functools.partial`` written ``name`` (the file's own import of
    it), the lines of its call kept aligned under its parenthesis."""

    def __init__(self, name):
        super().__init__()
        self.name = name

    @staticmethod
    def _is_functools_partial(node):
        return (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
                and node.value.value == "functools" and node.attr.value == "partial")

    def leave_Call(self, original_node, updated_node):
        if not self._is_functools_partial(original_node.func):
            return updated_node
        by = len("functools.partial") - len(self.name)
        if by <= 0:
            return updated_node
        return updated_node.with_changes(
            args=[a.visit(_Dedented(by)) for a in updated_node.args],
            whitespace_before_args=updated_node.whitespace_before_args.visit(_Dedented(by)))

    def leave_Attribute(self, original_node, updated_node):
        if self._is_functools_partial(updated_node):
            return cst.Name(self.name, lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node


def _bound_once_by_top_level_import(module, name):
    """Whether the only binding of ``name`` anywhere in ``module`` is one import
    at its top level, above every statement that reads ``functools.partial``
    (a notebook imports it in a later cell): then ``name`` means that import
    wherever the rewrites wrote ``functools.partial``."""
    scopes = {s for s in MetadataWrapper(module, unsafe_skip_copy=True).resolve(
        ScopeProvider).values() if s is not None}
    found = [a for s in scopes for a in s.assignments if a.name == name and a.scope is s]
    if len(found) != 1 or not isinstance(found[0].node, (cst.Import, cst.ImportFrom)):
        return False
    at = next((k for k, statement in enumerate(module.body)
               if isinstance(statement, cst.SimpleStatementLine)
               and found[0].node in statement.body), None)
    return at is not None and not any(
        _PartialRenamed._is_functools_partial(n) for statement in module.body[:at]
        for n in sx.nodes(statement))


def _own_partial_name(new, migrator):
    """``new`` written with the file's own ``partial`` (``from functools import
    partial``) where the rewrites said ``functools.partial`` and the file has no
    ``functools`` of its own; then ``import functools`` is added only if
    something still reads it (a helper)."""
    if "functools" not in migrator.imports or "functools" in migrator.original_names:
        return new
    names = {asname or obj for module, obj, asname, q in _import_aliases(new)
             if q == "functools.partial"}
    if len(names) != 1 or not _bound_once_by_top_level_import(new, next(iter(names))):
        return new
    new = new.visit(_PartialRenamed(names.pop()))
    if not any("functools" in h.imports for h in migrator.new_helpers) and (
            "functools" not in names_outside_imports(new)):
        migrator.imports.discard("functools")
    return new


def tidy_imports(new, migrator, report):
    """Drops classic imports nothing uses any more, adds the ones rewrites need."""
    context = CodemodContext()
    classic = (tuple(migrator.reasons) + tuple(migrator.calls) + tuple(migrator.moves)
               + ("jax.ops",))
    for module, obj, asname, q in _import_aliases(new):
        related = any(t == q or t.startswith(q + ".") for t in migrator.touched)
        if q != "jax" and (related or _under(q, classic)):
            RemoveImportsVisitor.remove_unused_import(context, module, obj, asname)
    new = RemoveImportsVisitor(context).transform_module(new)
    # ``import jax.experimental.maps`` binds ``jax``, so libcst keeps it while
    # ``jax`` is used: drop such classic imports that nothing left refers to.
    still = [k.name for k in report.left]
    drop = {q for module, obj, asname, q in _import_aliases(new)
            if obj is None and asname is None and "." in q
            and _under(q, classic)
            and not any(n == q or n.startswith(q + ".") for n in still)}
    if drop:
        new = new.visit(_DropDottedImports(drop))
    new = _own_numpy_name(new, migrator)
    new = _own_partial_name(new, migrator)
    for module in sorted(migrator.imports):
        AddImportsVisitor.add_needed_import(context, module)
    new = AddImportsVisitor(context).transform_module(new)
    return with_helpers(new, migrator.new_helpers)
