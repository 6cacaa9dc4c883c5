"""The driver: one libcst pass over a module applies every family's rules by
the qualified name of what the code refers to (through its imports), then
imports are added and classic ones that became unused are dropped.

Nothing outside a rewritten expression or import is touched, so comments and
formatting elsewhere stay as they were.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util

import libcst as cst
from libcst.metadata import PositionProvider, QualifiedNameProvider, ScopeProvider

from pmapkit.tools.migrate import (deprecations, file_imports, helpers, leftovers, pjit_plan,
                                   pmap_plan,
                                   rules_classic_names, rules_export, rules_host_callback,
                                   rules_modern, rules_pjit, rules_placement, rules_pmap,
                                   rules_trees_ops)
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import KeepPmap, LeaveAsIs
from pmapkit.tools.migrate.report import FileReport, Left, Rewrite

COMMENT = "# pmapkit migrate:"
_STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)


@functools.cache
def families():
    """Every family of rules (``base.Family``)."""
    return [make() for make in (rules_trees_ops.family, rules_classic_names.family,
                                rules_placement.family, pjit_plan.family,
                                rules_host_callback.family, rules_export.family,
                                pmap_plan.family, rules_modern.family)]


def tables():
    """Every family's rules merged: (moves, names, calls, attributes, reasons),
    each value paired with its family's name."""
    moves, names, calls, attributes, reasons = {}, {}, {}, {}, {}
    for fam in families():
        moves.update({k: (fam.name, v) for k, v in fam.moves.items()})
        names.update({k: (fam.name, v) for k, v in fam.names.items()})
        calls.update({k: (fam.name, v) for k, v in fam.calls.items()})
        attributes.update({k: (fam.name, v) for k, v in fam.attributes.items()})
        for name in fam.classic:
            reasons[name] = fam.reasons.get(name, "removed from JAX; rewrite it by hand")
    return moves, names, calls, attributes, reasons


# Classic modules that were another name for a JAX namespace: classic
# ``jax/__init__`` imported ``jax.api`` (jax's own API under another module
# name), so ``jax.api.X`` is ``jax.X`` and the rules of ``jax.X`` apply.
_ALIASES = {"jax.api": "jax"}


# The subpackages a bare ``import jax`` loads (so ``jax.X.name`` works after
# it); a name elsewhere (``jax.extend.core.Effect``,
# ``jax.example_libraries.optimizers``) needs its module imported.
LOADED_WITH_JAX = frozenset((
    "api_util", "core", "custom_batching", "custom_derivatives", "debug", "distributed",
    "dlpack", "dtypes", "errors", "export", "ffi", "image", "interpreters", "lax", "lib",
    "monitoring", "nn", "numpy", "ops", "profiler", "random", "ref", "scipy", "sharding",
    "stages", "tree", "tree_util", "typing", "version"))


@functools.lru_cache(maxsize=1024)
def module_to_import(dotted):
    """What to import so that the dotted name ``dotted`` can be read: ``jax``
    for a name of ``jax`` or of a subpackage it loads, else the name's module."""
    parts = dotted.split(".")
    if parts[0] != "jax":
        return parts[0]
    for cut in range(len(parts), 1, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            return "jax" if cut == 2 and parts[1] in LOADED_WITH_JAX else module
    return "jax"


def _canonical(q):
    key, rest = _longest_prefix(_ALIASES, q)
    if key is None:
        return q
    return _ALIASES[key] + ("." + rest if rest else "")


def _longest_prefix(table, q):
    """(key, rest) for the longest key of ``table`` that is ``q`` or a dotted prefix of it."""
    parts = q.split(".")
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in table:
            return key, ".".join(parts[cut:])
    return None, None


class Migrator(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ScopeProvider)

    def __init__(self, report):
        super().__init__()
        self.moves, self.names, self.calls, self.attributes, self.reasons = tables()
        self.report = report
        self.imports = set()          # top-level modules the new code needs
        self.helpers = {}             # name -> Helper
        self.frames = []              # per statement: {start: (name, why, kept)}
        self.comments = []            # per statement: comments a rewrite could not keep
        self.rewritten = set()        # starts of rewritten expressions
        self.touched = set()          # qualified names rewritten (their imports may go)
        self.try_catches = []         # per enclosing try: handler type texts
        self.import_depth = 0
        self.mesh_names = set()       # names, attribute names and functions giving a mesh
        self.mesh_attributes = set()
        self.mesh_functions = set()
        self.ops_index = {}           # id(numpy.s_[...] node) -> (slice text, start, old)
        self.targets = set()          # ids of nodes assigned to or deleted: left alone
        self.numpy_name = "jax.numpy"  # the file's name for jax.numpy (migrate_module)
        self.planners = {f.name: f.plan for f in families() if f.plan is not None}
        self.plans = {}               # family name -> its plan of this file (visit_Module)
        self.claimed = set()          # ids of decorator expressions a plan's hook rewrites
        self.strings = set()          # the string literals of the module, evaluated
        self.functions = []           # every def of the module
        self.resource_mesh = False    # the global mesh setting becomes _resource_mesh
        self.resource_mesh_blocker = None   # else why not
        self.depth = 0                # indented blocks around the statement visited
        self.default_indent = "    "
        self.new_helpers = []         # helpers this file needs and does not define

    # -- the context rules see ------------------------------------------------
    def qualname(self, node):
        """The jax (or functools) name a Name/Attribute refers to, or None;
        a classic alias module's member by its canonical name
        (``jax.api.jit`` is ``jax.jit``)."""
        raw = self.raw_qualname(node)
        return None if raw is None else _canonical(raw)

    def raw_qualname(self, node):
        """The name as the code spells it through its imports, aliases kept."""
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        names = self.get_metadata(QualifiedNameProvider, node, set())
        found = sorted(n.name for n in names
                       if n.name == "jax" or n.name.startswith(("jax.", "functools.")))
        return found[0] if found else None

    def need_import(self, module):
        self.imports.add(module)

    def need_helper(self, helper):
        self.helpers[helper.name] = helper
        self.imports.update(helper.imports)
        for other in helper.needs:
            self.need_helper(other)

    def free_axis_name(self, candidates):
        """The first of ``candidates`` that no string literal of the module spells."""
        return next((c for c in candidates if c not in self.strings), candidates[-1])

    def function_named(self, name):
        """The module's one ``def name`` (at any depth), or None."""
        found = [f for f in self.functions if f.name.value == name]
        return found[0] if len(found) == 1 else None

    @staticmethod
    def walk(node, kind):
        return _walk(node, kind)

    def indent(self):
        """The indentation of the statement being visited."""
        return self.default_indent * self.depth

    def column(self, node):
        return self._start(node)[1]

    def in_try_catching(self, exception):
        return any(exception in texts or "Exception" in texts for texts in self.try_catches)

    def ops_index_slice(self, node):
        entry = self.ops_index.pop(id(node), None)
        return None if entry is None else entry[0]

    # -- bookkeeping ----------------------------------------------------------
    def _start(self, node):
        pos = self.get_metadata(PositionProvider, node, None)
        return (0, 0) if pos is None else (pos.start.line, pos.start.column)

    def _rewrote(self, original, family, new_text, q=None):
        start = self._start(original)
        self.rewritten.add(start)
        if self.frames:
            self.frames[-1].pop(start, None)
        if q:
            self.touched.add(q)
        self.report.rewrites.append(Rewrite(start[0], family, sx.one_line(sx.code(original)),
                                            sx.one_line(new_text)))

    def _leave(self, original, name, why, kept=False):
        start = self._start(original)
        if self.frames and start not in self.rewritten:
            self.frames[-1][start] = (name, why, kept)

    def _moved(self, q):
        key, rest = _longest_prefix(self.moves, q)
        if key is None:
            # a name JAX deprecates in favour of the same object elsewhere
            target = deprecations.modern(q)
            return (None, None) if target is None else ("modern", target)
        family, target = self.moves[key]
        return family, target + ("." + rest if rest else "")

    # -- traversal ------------------------------------------------------------
    def on_visit(self, node):
        if isinstance(node, _STATEMENTS):
            self.frames.append({})
            self.comments.append([])
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            self.import_depth += 1
        if isinstance(node, cst.IndentedBlock):
            self.depth += 1
        return super().on_visit(node)

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, (cst.Import, cst.ImportFrom)):
            self.import_depth -= 1
        if isinstance(original_node, cst.IndentedBlock):
            self.depth -= 1
        if isinstance(original_node, _STATEMENTS):
            frame = self.frames.pop()
            comments = self.comments.pop()
            if comments and isinstance(result, _STATEMENTS):
                result = result.with_changes(leading_lines=list(result.leading_lines) + [
                    cst.EmptyLine(indent=True, comment=cst.Comment(c)) for c in comments])
            if frame and isinstance(result, _STATEMENTS):
                result = self._comment(result, frame)
        return result

    def _keep_comments(self, updated, new_text):
        """Comments inside ``updated`` that ``new_text`` does not carry go above
        the statement: a rewrite never drops one."""
        if not self.comments:
            return
        for comment in (c.value for c in _walk(updated, cst.Comment)):
            if comment in new_text:
                new_text = new_text.replace(comment, "", 1)
            else:
                self.comments[-1].append(comment)

    def _comment(self, statement, frame):
        lines = list(statement.leading_lines)
        present = {line.comment.value for line in lines if line.comment}
        for (line, _column), (name, why, kept) in sorted(frame.items()):
            if kept:
                self.report.kept.append(Left(line, name, why))
                text = f"{COMMENT} jax.pmap kept: {why}"
            else:
                self.report.left.append(Left(line, name, why))
                text = f"{COMMENT} {name} left as written: {why}"
            if text not in present:
                present.add(text)
                lines.append(cst.EmptyLine(indent=True, comment=cst.Comment(text)))
        return statement.with_changes(leading_lines=lines)

    def visit_Module(self, node):
        self.default_indent = node.default_indent
        self.functions = _walk(node, cst.FunctionDef)
        self._find_meshes(node)
        self.resource_mesh_blocker = rules_pjit.global_mesh_blocker(self, node)
        self.resource_mesh = self.resource_mesh_blocker is None
        for string in _walk(node, cst.SimpleString):
            try:
                self.strings.add(string.evaluated_value)
            except Exception:     # a bytes literal, an odd prefix: not an axis name
                pass
        # each family that plans its sites reads the whole module first
        self.plans = {name: make(self, node) for name, make in self.planners.items()}
        self.claimed = set().union(*(getattr(p, "decorators", ()) for p in self.plans.values()))

    def _hooks(self, name):
        return [getattr(p, name) for p in self.plans.values() if hasattr(p, name)]

    def _makes_mesh(self, node):
        """Whether the expression ``node`` makes a mesh: a mesh maker's call, a call
        of a function of the module that returns one, a name or attribute assigned one."""
        if isinstance(node, cst.Call):
            if self.qualname(node.func) in rules_pjit.MESH_MAKERS:
                return True
            return isinstance(node.func, cst.Name) and node.func.value in self.mesh_functions
        if isinstance(node, cst.Name):
            return node.value in self.mesh_names
        if isinstance(node, cst.Attribute):
            return node.attr.value in self.mesh_attributes
        return False

    def _find_meshes(self, module):
        # Until nothing new is found: names and attributes assigned a mesh, functions
        # returning one (``def make_mesh(): ... return Mesh(...)``, ``self.mesh = make_mesh()``).
        while True:
            before = (len(self.mesh_names), len(self.mesh_attributes), len(self.mesh_functions))
            for assign in _walk(module, cst.Assign):
                if len(assign.targets) == 1 and self._makes_mesh(assign.value):
                    target = assign.targets[0].target
                    if isinstance(target, cst.Name):
                        self.mesh_names.add(target.value)
                    elif isinstance(target, cst.Attribute):
                        self.mesh_attributes.add(target.attr.value)
            for fn in self.functions:
                if any(r.value is not None and self._makes_mesh(r.value)
                       for r in _walk(fn.body, cst.Return)):
                    self.mesh_functions.add(fn.name.value)
            if before == (len(self.mesh_names), len(self.mesh_attributes),
                          len(self.mesh_functions)):
                return

    def visit_AssignTarget(self, node):
        self.targets.add(id(node.target))

    def visit_AugAssign(self, node):
        self.targets.add(id(node.target))

    def visit_AnnAssign(self, node):
        self.targets.add(id(node.target))

    def visit_Del(self, node):
        self.targets.add(id(node.target))

    def visit_FunctionDef(self, node):
        return node.name.value not in helpers.DEFINED   # a helper written in before

    def visit_ClassDef(self, node):
        return node.name.value not in helpers.DEFINED

    def visit_Try(self, node):
        self.try_catches.append(" ".join(sx.code(h.type) for h in node.handlers if h.type))

    def leave_Try(self, original_node, updated_node):
        self.try_catches.pop()
        return updated_node

    # -- references -----------------------------------------------------------
    def leave_Name(self, original_node, updated_node):
        return self._reference(original_node, updated_node)

    def leave_Attribute(self, original_node, updated_node):
        attr = original_node.attr.value
        if id(original_node) in self.targets:
            return updated_node
        if (attr == "platform" and isinstance(original_node.value, cst.Call)
                and not original_node.value.args and not self.import_depth
                and self.qualname(original_node.value.func) in rules_classic_names.BACKEND_PLATFORM):
            self.need_import("jax")
            self._rewrote(original_node, "classic", "jax.default_backend()",
                          self.qualname(original_node.value.func))
            return sx.expr("jax.default_backend()")
        if attr in self.attributes and self.qualname(original_node) is None \
                and not self.import_depth:
            family, rule = self.attributes[attr]
            text = rule(self, original_node, updated_node)
            self._rewrote(original_node, family, text)
            return sx.expr(text)
        return self._reference(original_node, updated_node)

    def _reference(self, original, updated):
        if self.import_depth:
            return updated
        q = self.qualname(original)
        if q is None or (self._start(original) in self.rewritten and q not in self.moves):
            return updated      # (a member moved apart from its module is moved again)
        if q.startswith("jax.random.") and q not in _RANDOM_TYPES:
            # the original draws classic streams (pmapkit run's default): so
            # must the migrated file
            self.need_helper(helpers.CLASSIC_PRNG)
        raw = self.raw_qualname(original)
        for reference in self._hooks("reference"):
            why = reference(original, q)    # a name a family's calls handle, or keep
            if why is not False:
                if why:
                    self._leave(original, q, why, kept=True)
                return updated
        if raw in _ALIASES and not isinstance(original, cst.Name):
            # ``jax.api`` read as an attribute: its canonical module (what
            # follows it, a call of a classic name, is then rewritten too).
            self.need_import(q.split(".")[0])
            self._rewrote(original, "imports", q, raw)
            return sx.expr(q)
        if q in self.names:
            family, text = self.names[q]
            self.need_import(module_to_import(text.split("(")[0]))
            self._rewrote(original, family, text, q)
            return sx.expr(text)
        family, target = self._moved(q)
        if target is not None:
            if isinstance(original, cst.Name):
                return updated          # bound by an import, which is rewritten
            root = sx.root_name(original)
            root_q = self.qualname(root) if root is not None else None
            root_target = self._moved(root_q or "")[1]
            if root_target is not None:
                # through a moved import: only a member renamed apart (optix.InitUpdate
                # is optax.GradientTransformation) changes
                plain = root_target + q[len(root_q):]
                if target == plain or not target.startswith(root_target + "."):
                    return updated
                text = root.value + target[len(root_target):]
                self._rewrote(original, family, text, q)
                return sx.expr(text)
            self.need_import(module_to_import(target))
            self._rewrote(original, family, target, q)
            return sx.expr(target)
        key, _ = _longest_prefix(self.reasons, q)
        if key is not None:
            self._leave(original, q, self.reasons[key])
        return updated

    def leave_Subscript(self, original_node, updated_node):
        if self.import_depth or self.qualname(original_node.value) != "jax.ops.index":
            return updated_node
        inner = ", ".join(sx.code(e.with_changes(comma=cst.MaybeSentinel.DEFAULT))
                          for e in updated_node.slice)
        new = sx.expr(f"numpy.s_[{inner}]")
        start = self._start(original_node)
        self.rewritten.add(start)
        if self.frames:
            self.frames[-1].pop(start, None)
        self.touched.add("jax.ops.index")
        self.ops_index[id(new)] = (inner, start, sx.one_line(sx.code(original_node)))
        return new

    # -- calls ----------------------------------------------------------------
    def leave_Call(self, original_node, updated_node):
        for leave_call in self._hooks("leave_call"):
            updated_node = leave_call(self, original_node, updated_node)
        q = self.qualname(original_node.func)
        if (isinstance(original_node.func, cst.Attribute) and not updated_node.args
                and original_node.func.attr.value == rules_classic_names.TO_PY):
            # a classic array's value as numpy
            text = f"numpy.asarray({sx.code(updated_node.func.value)})"
            self.need_import("numpy")
            self._rewrote(original_node, "classic", text)
            return sx.expr(text)
        if q is None or id(original_node) in self.claimed:
            return updated_node
        try:
            if q in rules_pmap.PARTIAL:
                text = rules_pmap.partial_pmap(self, original_node, updated_node)
                family, q = "pmap", rules_pmap.PMAP
                if text is None:
                    text = rules_pjit.partial_pjit(self, original_node, updated_node)
                    family, q = "pjit", rules_pjit.PJIT_NAMES[0]
                if text is None:
                    text = rules_modern.partial_shard_map(self, original_node, updated_node)
                    family, q = "modern", rules_modern.SHARD_MAP
                if text is None:
                    return updated_node
                self.frames[-1].pop(self._start(original_node.args[0].value), None)
            elif q in self.calls:
                family, rule = self.calls[q]
                text = rule(self, original_node, updated_node)
                if text is None:      # already modern: nothing to rewrite
                    return updated_node
            else:
                return updated_node
        except LeaveAsIs as exc:
            self._leave(original_node, q, exc.why)
            return updated_node
        except KeepPmap as exc:
            self._leave(original_node, rules_pmap.PMAP, exc.why, kept=True)
            return updated_node
        self._rewrote(original_node, family, text, q)
        self._keep_comments(updated_node, text)
        new = sx.expr(text)
        if updated_node.lpar:
            new = new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return new

    def leave_FunctionDef(self, original_node, updated_node):
        for leave_function in self._hooks("leave_function"):
            updated_node = leave_function(self, original_node, updated_node)
        return updated_node

    def leave_Decorator(self, original_node, updated_node):
        """A decorator a family's plan rewrites (a pmap decorator), a bare ``@pjit``."""
        for plan in self.plans.values():
            if hasattr(plan, "decorator"):
                done = self._planned_decorator(plan, original_node, updated_node)
                if done is not None:
                    return done
        q = self.qualname(original_node.decorator)
        if q in rules_pjit.PJIT_NAMES:
            self.need_import("jax")
            family, text = "pjit", "jax.jit"
        else:
            return updated_node
        self._rewrote(original_node.decorator, family, text, q)
        return updated_node.with_changes(decorator=sx.expr(text))

    def _planned_decorator(self, plan, original_node, updated_node):
        """What ``plan``'s hook makes of a decorator: None when not its own."""
        try:
            texts = plan.decorator(self, original_node, updated_node)
        except LeaveAsIs as exc:
            self._leave(original_node.decorator, plan.qualname, exc.why)
            return updated_node
        except KeepPmap as exc:
            self._leave(original_node.decorator, plan.qualname, exc.why, kept=True)
            return updated_node
        if texts is None or isinstance(texts, cst.RemovalSentinel):
            return texts
        self.need_import("functools")
        self._rewrote(original_node.decorator, plan.family, "; ".join(f"@{t}" for t in texts),
                      plan.qualname)
        self._keep_comments(updated_node, "")
        first = updated_node.with_changes(decorator=sx.expr(texts[0]))
        return cst.FlattenSentinel([first] + [cst.Decorator(decorator=sx.expr(t))
                                              for t in texts[1:]])

    # -- with mesh: -------------------------------------------------------------
    def leave_With(self, original_node, updated_node):
        items = list(updated_node.items)
        for k, item in enumerate(original_node.items):
            e = item.item
            if not self._makes_mesh(e):
                continue
            inner = sx.code(items[k].item)
            if items[k].asname is not None:
                inner = f"{sx.code(items[k].asname.name)} := {inner}"
            text = f"jax.set_mesh({inner})"
            self.need_import("jax")
            self._rewrote(e, "pjit", text, "with mesh")
            items[k] = items[k].with_changes(item=sx.expr(text), asname=None)
        return updated_node.with_changes(items=items)

    # -- imports ----------------------------------------------------------------
    def leave_SimpleStatementLine(self, original_node, updated_node):
        for leave_statement in self._hooks("leave_statement"):
            # a statement a family writes anew (name = jax.pmap(lambda ...): a named def)
            text = leave_statement(self, original_node, updated_node)
            if text is None:
                continue
            self.need_import("functools")
            last = self.report.rewrites.pop()
            self.report.rewrites.append(dataclasses.replace(last, new=sx.one_line(
                "; ".join(line.strip() for line in text.splitlines() if line.startswith(
                    ("@", "def "))))))
            return cst.parse_statement(text).with_changes(
                leading_lines=updated_node.leading_lines)
        if rules_pjit.global_mesh_setting(self, original_node) and self.resource_mesh:
            # the whole statement is replaced: the LEFT lines of its parts go
            text = rules_pjit.resource_mesh(self, updated_node)
            self.frames[-1].clear()
            self._rewrote(original_node.body[0], "pjit", text,
                          self.qualname(original_node.body[0].targets[0].target))
            self._keep_comments(updated_node, text)
            return updated_node.with_changes(body=[cst.Expr(sx.expr(text))])
        if rules_pjit.global_mesh_setting(self, original_node):
            # the env's LEFT line says why jax.set_mesh(mesh) is not written
            assign = original_node.body[0]
            self._leave(assign.targets[0].target, self.qualname(assign.targets[0].target),
                        f"{rules_pjit.GLOBAL_MESH_WHY} ({self.resource_mesh_blocker})")
            return updated_node
        if len(original_node.body) == 1 and self._dropped(original_node.body[0]):
            self._rewrote(original_node.body[0], "classic", "(dropped: JAX always does it)",
                          self.qualname(original_node.body[0].value.func))
            return cst.RemoveFromParent()
        if len(original_node.body) != 1 or not isinstance(original_node.body[0], cst.ImportFrom):
            return updated_node
        return self._import_from(original_node, updated_node)

    def _dropped(self, statement):
        """Whether ``statement`` asks for what JAX now always does
        (``config.enable_omnistaging()``, ``config.update("jax_omnistaging", True)``)."""
        if not isinstance(statement, cst.Expr) or not isinstance(statement.value, cst.Call):
            return False
        call = statement.value
        q = self.qualname(call.func)
        if q in rules_classic_names.DROPPED_CALLS:
            return not call.args
        if q in rules_classic_names.CONFIG_UPDATES and len(call.args) == 2 and isinstance(
                call.args[0].value, cst.SimpleString):
            option = (call.args[0].value.evaluated_value, sx.code(call.args[1].value))
            return option in rules_classic_names.DROPPED_UPDATES
        return False

    def leave_Import(self, original_node, updated_node):
        """``import jax.experimental.optix as optix``: the moved module, same local name."""
        names = []
        for alias in updated_node.names:
            if alias.asname is not None:
                _family, target = self._moved(sx.code(alias.name))
                if target is not None:
                    self._rewrote(original_node, "imports", f"import {target}")
                    alias = alias.with_changes(name=sx.expr(target))
            names.append(alias)
        return updated_node.with_changes(names=names)

    def _import_from(self, original_line, line):
        imp = line.body[0]
        if imp.relative or isinstance(imp.names, cst.ImportStar) or imp.module is None:
            return line
        module = sx.code(imp.module)
        aliased = module in _ALIASES       # from jax.api import (...): from jax import (...)
        if aliased:
            module = _ALIASES[module]
            imp = imp.with_changes(module=sx.expr(module))
            line = line.with_changes(body=[imp])
        groups = {}      # new module -> [ImportAlias]
        kept = []
        for alias in imp.names:
            name = sx.code(alias.name)
            local = sx.code(alias.asname.name) if alias.asname else name
            _family, target = self._moved(f"{module}.{name}")
            if target is not None and "." not in target:
                # a module moved to a package of its own (optix → optax)
                groups.setdefault(None, []).append(cst.ImportAlias(
                    name=cst.Name(target),
                    asname=None if target == local else cst.AsName(name=cst.Name(local))))
                continue
            if target is None:
                kept.append(alias)
                continue
            new_module, _, new_name = target.rpartition(".")
            groups.setdefault(new_module, []).append(cst.ImportAlias(
                name=cst.Name(new_name),
                asname=None if new_name == local else cst.AsName(name=cst.Name(local))))
        if not groups:
            if aliased:
                self._rewrote(original_line.body[0], "imports", sx.code(imp))
            return line
        statements = []
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            statements.append(line.with_changes(body=[imp.with_changes(
                names=kept, lpar=None, rpar=None) if len(kept) > 0 else imp]))
        for new_module, aliases in groups.items():
            statement = (cst.Import(names=aliases) if new_module is None
                         else cst.ImportFrom(module=sx.expr(new_module), names=aliases))
            if statements:
                statements.append(cst.SimpleStatementLine(body=[statement]))
            else:
                statements.append(line.with_changes(body=[statement]))
        text = "; ".join(sx.code(s.body[0]) for s in statements[1 if kept else 0:])
        self._rewrote(original_line.body[0], "imports", text)
        if len(statements) == 1:
            return statements[0]
        return cst.FlattenSentinel(statements)

    # -- the module -------------------------------------------------------------
    def leave_Module(self, original_node, updated_node):
        for _inner, start, old in self.ops_index.values():
            self.imports.add("numpy")
            self.report.rewrites.append(Rewrite(start[0], "trees/ops", old, "numpy.s_[...]"))
        defined = {s.name.value for s in updated_node.body if isinstance(s, cst.FunctionDef)}
        statements = {updated_node.code_for_node(s.with_changes(leading_lines=())).strip()
                      for s in updated_node.body if isinstance(s, cst.SimpleStatementLine)}
        defined |= {h.name for h in self.helpers.values() if h.inline and all(
            updated_node.code_for_node(s.with_changes(leading_lines=())).strip() in statements
            for s in cst.parse_module(h.source).body)}
        # Written in by migrate_module once the imports are settled (the import
        # passes need not walk the helpers).
        self.new_helpers = [h for name, h in self.helpers.items() if name not in defined]
        self.report.helpers.extend(h.name for h in self.new_helpers)
        return updated_node


# jax.random names that draw nothing (types): no classic-stream helper for them
_RANDOM_TYPES = {"jax.random.KeyArray", "jax.random.PRNGKeyArray"}


def _walk(node, kind):
    found = []

    class _Finder(cst.CSTVisitor):
        def on_visit(self, n):
            if isinstance(n, kind):
                found.append(n)
            return True

    node.visit(_Finder())
    return found


def migrate_module(source, path="<string>"):
    """(new source, FileReport) for the Python source text ``source``.
    Raises ``libcst.ParserSyntaxError`` when it does not parse."""
    report = FileReport(path)
    tree = cst.parse_module(source)
    unread = file_imports.unread_classic_imports(tree)
    migrator = Migrator(report)
    migrator.numpy_name = file_imports.numpy_name(tree)
    migrator.original_names = file_imports.names_outside_imports(tree)
    new = cst.MetadataWrapper(tree).visit(migrator)
    if unread:
        new = file_imports.drop_imports(new, unread, report)
    if report.rewrites or report.helpers:
        new = file_imports.tidy_imports(new, migrator, report)
    # "0 left" must mean it: whatever the rules missed is found in the output.
    report.left.extend(leftovers.unreported(new.code, report.left, new.code != source))
    return new.code, report
