"""The pjit family's plan of one file (``Family.plan``): which pjit sites
become plain ``jax.jit(f, in_shardings=..., out_shardings=...)`` as a JAX
engineer writes it, and which keep ``_pjit`` (``written``).

The two differ only in where arguments are laid out. Classic pjit put each
argument where its spec said; ``jax.jit`` lays out an *uncommitted* argument
the same way but refuses a *committed* one laid out otherwise, and on JAX
0.10 every array made or computed by ``jax.numpy`` inside ``with
jax.set_mesh(mesh):`` is committed (replicated over the mesh). A site is
plain where that cannot happen or is said in place:

- its specs are literal (``PartitionSpec(...)`` calls, their entries
  literal or computed, ``None``, tuples of them, or a name assigned such a
  literal once in its scope): a ``None`` is written ``P()`` (classic pjit's
  replicated);
- the pjit is used only by calling it (``f = pjit(...)`` or a
  ``@partial(pjit, ...)`` def called by name, ``pjit(...)(x)``), with
  positional arguments only: printed, passed on or lowered, it is classic
  pjit's wrapped function, which ``jax.jit`` is not;
- each argument is a numpy value (literals, ``numpy`` calls and their
  methods and operators, names only ever assigned such values), which
  ``jax.jit`` lays out as classic pjit did, or, where the name is assigned
  once and its spec is one leaf, is put there at the call with
  ``jax.device_put(x, spec)`` (what classic pjit did, said in place).

Any other site keeps ``_pjit``, written once per file.
"""
from __future__ import annotations

import dataclasses

import libcst as cst
from libcst.metadata import QualifiedNameProvider, ScopeProvider

from pmapkit.tools.migrate import rules_pjit
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.rules_pjit import none as _none

PARTITION_SPECS = ("jax.experimental.PartitionSpec", "jax.sharding.PartitionSpec",
                   "jax.interpreters.pxla.PartitionSpec", "jax.experimental.pjit.PartitionSpec",
                   "jax.experimental.maps.PartitionSpec", "jax.P")


@dataclasses.dataclass
class _Site:
    call: cst.Call            # the pjit call (a decorator's: its partial)
    bound: dict               # its arguments by name
    leaves: list              # (spec tree, per positional argument or one for all)
    uses: list = dataclasses.field(default_factory=list)   # the calls of it


class PjitPlan:
    """The plan of one module's pjit sites (the tables its hooks read)."""
    family, qualname = "pjit", rules_pjit.PJIT_NAMES[0]

    def __init__(self, ctx, module):
        self.ctx = ctx
        self.plain = set()        # ids of pjit calls (or partials) written as jax.jit
        self.puts = {}            # id of a call of a plain site -> {argument index: spec text}
        self.replicated = "jax.P()"
        if ctx.resource_mesh:     # each call is under the kept mesh (_pjit_resource_mesh)
            return
        self.parents = {}
        for node in sx.nodes(module):
            for child in node.children:
                self.parents[id(child)] = node
        specs = [n for n in sx.nodes(module) if isinstance(n, cst.Call)
                 and ctx.qualname(n.func) in PARTITION_SPECS and isinstance(n.func, cst.Name)]
        if specs:     # the file's own name for PartitionSpec writes a None spec
            self.replicated = f"{specs[0].func.value}()"
        for site, name_node in self._sites(module):
            self._plan(site, name_node)

    # -- the sites and their uses --------------------------------------------------
    def _sites(self, module):
        q = self.ctx.qualname
        for node in sx.nodes(module):
            if isinstance(node, cst.Call) and q(node.func) in rules_pjit.PJIT_NAMES:
                bound, why = rules_pjit._pjit_problem(node)
                parent = self.parents.get(id(node))
                if why is not None:
                    continue
                if isinstance(parent, cst.Call) and parent.func is node:
                    yield _Site(node, bound, [], [parent]), None
                elif (isinstance(parent, cst.Assign) and len(parent.targets) == 1
                      and isinstance(parent.targets[0].target, cst.Name)):
                    yield _Site(node, bound, []), parent.targets[0].target
            elif isinstance(node, cst.FunctionDef) and len(node.decorators) == 1:
                deco = node.decorators[0].decorator
                if (isinstance(deco, cst.Call) and q(deco.func) in ("functools.partial",)
                        and deco.args and deco.args[0].keyword is None
                        and q(deco.args[0].value) in rules_pjit.PJIT_NAMES):
                    as_call = deco.with_changes(args=[cst.Arg(cst.Name("f"))]
                                                + list(deco.args[1:]))
                    bound, why = rules_pjit._pjit_problem(as_call)
                    if why is None:
                        yield _Site(deco, bound, []), node

    def _uses(self, name_node):
        """(the calls of the site's name, whether the name is bound once), or None
        where it is used otherwise or also bound to other than a pjit."""
        scope = self.ctx.get_metadata(ScopeProvider, name_node, None)
        if scope is None:
            return None
        if isinstance(name_node, cst.FunctionDef):
            assignments = list(scope.assignments[name_node.name.value])
            if len(assignments) != 1:
                return None
        else:
            assignments = list(scope.assignments[name_node.value])
            for assignment in assignments:      # f = pjit(...) again and again (notebooks)
                target = self.parents.get(id(assignment.node))
                statement = self.parents.get(id(target))
                if not (isinstance(target, cst.AssignTarget) and isinstance(statement, cst.Assign)
                        and isinstance(statement.value, cst.Call)
                        and self.ctx.qualname(statement.value.func) in rules_pjit.PJIT_NAMES):
                    return None
        calls = {}
        for assignment in assignments:
            for access in assignment.references:
                parent = self.parents.get(id(access.node))
                if not (isinstance(parent, cst.Call) and parent.func is access.node):
                    return None
                calls[id(parent)] = parent
        return list(calls.values()), len(assignments) == 1

    # -- the plan ---------------------------------------------------------------------
    def _plan(self, site, name_node):
        if any(k in site.bound for k in ("static_argnums", "static_argnames")):
            return
        specs_in = rules_pjit._either(site.bound, "in_axis_resources", "in_shardings")
        specs_out = rules_pjit._either(site.bound, "out_axis_resources", "out_shardings")
        if specs_in is None and specs_out is None:
            return
        for specs in (specs_in, specs_out):
            if specs is not None and not self._literal_specs(specs.value):
                return
        once = True
        if name_node is not None:
            uses = self._uses(name_node)
            if uses is None:
                return
            site.uses, once = uses
        puts = {}
        for call in site.uses:
            if any(a.keyword is not None or a.star for a in call.args):
                return
            for k, arg in enumerate(call.args):
                if self._host(arg.value):
                    continue
                spec = self._put_spec(specs_in, k, len(call.args)) if once else None
                if spec is None or self._names_in(spec) and not self._same_scope(
                        call, name_node if name_node is not None else site.call):
                    return
                puts.setdefault(id(call), {})[k] = (
                    self.replicated if _none(spec) else sx.code(spec))
        self.plain.add(id(site.call))
        self.puts.update(puts)

    def _same_scope(self, a, b):
        scope = self.ctx.get_metadata(ScopeProvider, a, None)
        return scope is not None and scope is self.ctx.get_metadata(ScopeProvider, b, None)

    @staticmethod
    def _put_spec(specs_in, k, count):
        """The spec leaf argument ``k`` of ``count`` is put at, or None where its spec
        is a tree."""
        if specs_in is None:
            return None
        tree = specs_in.value
        if isinstance(tree, (cst.Tuple, cst.List)):
            if len(tree.elements) != count:
                return None
            tree = tree.elements[k].value
        if isinstance(tree, cst.Call) and not isinstance(tree.func, cst.Name):
            return None       # jax.experimental.PartitionSpec(...): migrate renames it
        return None if isinstance(tree, (cst.Tuple, cst.List)) else tree

    @staticmethod
    def _names_in(tree):
        """Whether a spec leaf reads a name (where the pjit is made): a name, or a
        PartitionSpec whose entries are not literal."""
        if isinstance(tree, cst.Call):
            return not all(not a.star and _axis_entry(a.value) for a in tree.args)
        return isinstance(tree, cst.Name) and not _none(tree)

    def _literal_specs(self, node, depth=0):
        if _none(node):
            return True
        if isinstance(node, (cst.Tuple, cst.List)):
            return all(not isinstance(e, cst.StarredElement)
                       and self._literal_specs(e.value, depth) for e in node.elements)
        if isinstance(node, cst.Call):
            # a PartitionSpec, its entries literal or computed (P(*names)): never None
            return (self.ctx.qualname(node.func) in PARTITION_SPECS
                    and all(a.keyword is None for a in node.args))
        if isinstance(node, cst.Name) and depth == 0:
            # a name assigned a literal once; its None leaves would need writing out
            value = self._assigned_once(node)
            return (value is not None and not _has_none_leaf(value)
                    and self._literal_specs(value, depth + 1))
        return False

    def _assigned_once(self, name):
        """The value of the one plain assignment ``name`` refers to, or None."""
        scope = self.ctx.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return None
        accesses = [a for a in scope.accesses[name.value] if a.node is name]
        if len(accesses) != 1:
            return None
        referents = list(accesses[0].referents)
        if len(referents) != 1 or not isinstance(referents[0].node, cst.Name):
            return None
        if len(referents[0].scope.assignments[name.value]) != 1:
            return None
        target = self.parents.get(id(referents[0].node))
        statement = self.parents.get(id(target))
        if not (isinstance(target, cst.AssignTarget) and isinstance(statement, cst.Assign)
                and len(statement.targets) == 1):
            return None
        return statement.value

    # -- numpy values -------------------------------------------------------------------
    def _numpy(self, func):
        names = self.ctx.get_metadata(QualifiedNameProvider, func, set())
        return any(n.name == "numpy" or n.name.startswith("numpy.") for n in names)

    def _host(self, node, depth=0):
        """Whether ``node`` is provably a numpy value or a Python literal."""
        if depth > 8:
            return False
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
                             cst.ConcatenatedString)):
            return True
        if isinstance(node, cst.Name):
            if node.value in ("None", "True", "False"):
                return True
            value = self._assigned_once(node)
            return value is not None and self._host(value, depth + 1)
        if isinstance(node, (cst.Tuple, cst.List)):
            return all(not isinstance(e, cst.StarredElement) and self._host(e.value, depth)
                       for e in node.elements)
        if isinstance(node, cst.Dict):
            return all(isinstance(e, cst.DictElement) and self._host(e.value, depth)
                       for e in node.elements)
        if isinstance(node, cst.UnaryOperation):
            return self._host(node.expression, depth)
        if isinstance(node, cst.BinaryOperation):
            return self._host(node.left, depth) and self._host(node.right, depth)
        if isinstance(node, cst.Call):
            args = all(a.star == "" and self._host(a.value, depth) or self._numpy_name(a.value)
                       for a in node.args)
            if self._numpy(node.func):        # numpy.f(...): a numpy value
                return True
            # a method of a numpy value (.astype, .reshape) with numpy arguments
            return (isinstance(node.func, cst.Attribute) and self._host(node.func.value, depth)
                    and args)
        if isinstance(node, cst.Attribute):    # x.T of a numpy value
            return not self._numpy(node) and self._host(node.value, depth)
        return False

    def _numpy_name(self, node):
        """``np.float32`` and such, passed to a numpy method."""
        return isinstance(node, (cst.Name, cst.Attribute)) and self._numpy(node)

    # -- the hooks the driver calls -----------------------------------------------------
    def leave_call(self, ctx, original, updated):
        """A call of a plain site with an argument put where its spec says."""
        puts = self.puts.get(id(original))
        if not puts:
            return updated
        ctx.need_import("jax")
        args = list(updated.args)
        for k, spec in puts.items():
            args[k] = args[k].with_changes(value=sx.expr(
                f"jax.device_put({sx.code(args[k].value)}, {spec})"))
        return updated.with_changes(args=args)


def _has_none_leaf(node):
    if isinstance(node, (cst.Tuple, cst.List)):
        return any(_has_none_leaf(e.value) for e in node.elements)
    return _none(node)


def _axis_entry(node):
    """A PartitionSpec entry written literally: a string, None, a tuple of strings."""
    if _none(node) or isinstance(node, cst.SimpleString):
        return True
    return isinstance(node, (cst.Tuple, cst.List)) and all(
        isinstance(e.value, cst.SimpleString) for e in node.elements)


def family():
    """The pjit family: ``rules_pjit``'s rules, planned by ``PjitPlan``."""
    return dataclasses.replace(rules_pjit.family(), plan=PjitPlan)
