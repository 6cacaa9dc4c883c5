"""The pmap family's plan of one file (``Family.plan``): which pmap sites are
translated how, read from the whole module before any rewrite.

The driver (``transformer``) calls ``PmapPlan(ctx, module)`` once per file
and then the plan's hooks, knowing nothing of what they decide:
``decorator`` (the decorators standing for a pmap decorator), ``leave_call``,
``leave_function`` and ``leave_statement``. The plan finds

- pmaps of pmaps: two stacked pmap decorators, ``jax.pmap(jax.pmap(f))``
  (one shard_map over a 2-D mesh, ``rules_pmap``), a pmap-decorated def
  called in a pmap-decorated def's body (``nested_pmaps``), and every other
  pmap of a pmap (left, with why);
- what each site's translation needs to know about the file: the names bound
  to a pmap, whether meshes follow the arguments (``mapped_sizes``), whether
  a pmap runs over ``devices=`` it chooses, a def whose body can take the
  mapped axis off itself (``pmap_bodies``), ``name = jax.pmap(lambda ...)``
  (a named def), a pmap that is ``jax.jit``'s one argument.
"""
from __future__ import annotations

import dataclasses

import libcst as cst

from pmapkit.tools.migrate import mapped_sizes, nested_pmaps, pmap_bodies, rules_pmap
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import KeepPmap, LeaveAsIs


def _walk(node, kind):
    return [n for n in sx.nodes(node) if isinstance(n, kind)]


class PmapPlan:
    """The plan of one module's pmap sites (the tables its hooks read)."""
    family, qualname = "pmap", rules_pmap.PMAP

    def __init__(self, ctx, module):
        self.ctx = ctx
        self.nested_pmaps = set()     # ids of pmap calls in a pmap of a pmap
        self.nests = {}               # id of a planned outer decorator -> Nest
        self.nest_inners = {}         # id of a planned inner decorator -> (Nest, Inner)
        self.nest_closures = {}       # id of an inner def or of its call -> names passed
        self.nest_unplanned = {}      # id of an inner pmap of a nest left -> why
        self.stacked_pmaps = {}       # id of the outer of two stacked pmap decorators -> inner
        self.stacked_inner = {}       # id of the inner one -> True (the outer translated) or why
        self.stacked_calls = {}       # id of jax.pmap(jax.pmap(f)) -> the inner call
        self.stacked_calls_inner = {}  # id of that inner call -> the outer call
        self.inline_defs = {}         # id of a def's one pmap decorator -> the def
        self.inline_plans = {}        # id of a def whose body takes the mapped axis off -> Plan
        self.static_plans = {}        # id of such a def with statics -> (Site, StaticPlan)
        self.named_defs = {}          # id of a `name = jax.pmap(lambda ...)` call -> its def
        self.assigned_calls = {}      # id of a call assigned to one name -> the name
        self.jitted_calls = set()     # ids of calls that are jax.jit's one argument
        self.called_at_once = set()   # ids of pmap calls called where made (jax.pmap(f)(x))
        # names bound once in the file (a def not rebound: what a named def may call)
        self.bound_once = {n for n, values in sx.bindings(module).items() if len(values) == 1}
        self.callees = set()          # ids of jax.pmap references a call or decorator handles
        self.decorators = set()       # ids of pmap decorator expressions
        self._read(module)
        self._find_nested_pmaps(module)
        self.meshes_follow_arguments = mapped_sizes.meshes_follow_arguments(
            self, module, self.pmapped_names)
        # where every site provably maps one size written in the source, its mesh is
        # that many devices, written out (no _first_devices)
        self.literal_sizes = {}
        if self.meshes_follow_arguments and not (self.nested_pmaps or self.stacked_pmaps
                                                 or self.stacked_calls):
            sites = [c for c in _walk(module, cst.Call)
                     if self.ctx.qualname(c.func) == rules_pmap.PMAP]
            found = mapped_sizes.literal_sizes(self, module, sites, self.inline_defs)
            if found is not None and len(found) == len(sites) + len(self.inline_defs) == len(
                    self.decorators) + len(sites):
                self.literal_sizes = found
                self.meshes_follow_arguments = False
        # a pmap over devices= (not jax.local_devices()): a device index is not a local device
        self.pmap_over_chosen_devices = any(
            self.site(call) is not False and any(
                a.keyword is not None and a.keyword.value == "devices"
                and sx.code(a.value) != "None" for a in call.args)
            for call in _walk(module, cst.Call))

    # -- reading the module ------------------------------------------------------
    def site(self, node):
        """The pmap function argument's node of a pmap call or decorator ``node``, or
        False when ``node`` is none (True: a bare ``@jax.pmap``)."""
        q = self.ctx.qualname
        if isinstance(node, cst.Call):
            if q(node.func) == rules_pmap.PMAP:
                return node.args[0].value if node.args and not node.args[0].keyword else True
            if (q(node.func) in rules_pmap.PARTIAL and node.args
                    and q(node.args[0].value) == rules_pmap.PMAP):
                return True
        return q(node) == rules_pmap.PMAP

    def _read(self, module):
        q = self.ctx.qualname
        for node in sx.nodes(module):
            if isinstance(node, cst.Call):
                if q(node.func) == rules_pmap.PMAP:
                    self.callees.add(id(node.func))
                elif (q(node.func) in rules_pmap.PARTIAL and node.args
                      and q(node.args[0].value) == rules_pmap.PMAP):
                    self.callees.add(id(node.args[0].value))
                if isinstance(node.func, cst.Call) and q(node.func.func) == rules_pmap.PMAP:
                    self.called_at_once.add(id(node.func))
                if (q(node.func) == "jax.jit" and len(node.args) == 1
                        and node.args[0].keyword is None and not node.args[0].star
                        and isinstance(node.args[0].value, cst.Call)):
                    self.jitted_calls.add(id(node.args[0].value))
            elif isinstance(node, cst.Decorator):
                if q(node.decorator) == rules_pmap.PMAP:
                    self.callees.add(id(node.decorator))
                if self.site(node.decorator) is not False:
                    self.decorators.add(id(node.decorator))
            elif isinstance(node, cst.Assign):
                if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                        and isinstance(node.value, cst.Call)):
                    self.assigned_calls[id(node.value)] = node.targets[0].target.value
            elif isinstance(node, cst.FunctionDef):
                pmaps = [d.decorator for d in node.decorators if self.site(d.decorator)]
                if len(pmaps) == 1:     # its body may take the mapped axis off (pmap_bodies)
                    self.inline_defs[id(pmaps[0])] = node

    def _find_nested_pmaps(self, module):
        # Names bound to a pmap (``inner = jax.pmap(...)``, a pmap-decorated def), then
        # each pmap whose function is one of them or a pmap call: both are nested.
        start = self.ctx._start
        made = {}
        for assign in _walk(module, cst.Assign):
            if (len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
                    and isinstance(assign.value, cst.Call) and self.site(assign.value)):
                made.setdefault(assign.targets[0].target.value, []).append(assign.value)
        for fn in _walk(module, cst.FunctionDef):
            sites = [d.decorator for d in fn.decorators if self.site(d.decorator)]
            if sites:
                made.setdefault(fn.name.value, []).append(sites[0])
            pmaps = [k for k, d in enumerate(fn.decorators) if self.site(d.decorator)]
            if len(sites) == 2 and pmaps[1] == pmaps[0] + 1:
                # two stacked pmap decorators: one shard_map over a 2-D mesh (rules_pmap)
                self.stacked_pmaps[id(sites[0])] = sites[1]
                self.stacked_inner[id(sites[1])] = None
            elif len(sites) > 1:      # more, or apart: a pmap of a pmap
                self.nested_pmaps.update(map(id, sites))
        self.pmapped_names = set(made)
        # a statement of the module runs in order: a name it maps is bound to a pmap
        # only by a binding above it (a notebook redefines f as a pmap further down)
        in_order = {id(c) for s in module.body if not isinstance(s, (cst.FunctionDef,
                    cst.ClassDef)) for c in _walk(s, cst.Call)}
        outer = {}      # def name -> the pmap calls that map it
        mapped_again = set()   # ids of pmap sites whose function a pmap maps again
        stacked_calls = {}
        for call in _walk(module, cst.Call):
            fun = self.site(call)
            if isinstance(fun, cst.Call) and self.site(fun) is not False:
                if (self.ctx.qualname(call.func) == rules_pmap.PMAP
                        and self.ctx.qualname(fun.func) == rules_pmap.PMAP):
                    stacked_calls[id(call)] = (call, fun)   # jax.pmap(jax.pmap(f)): one 2-D site
                else:
                    self.nested_pmaps.update((id(call), id(fun)))
            elif isinstance(fun, cst.Name):
                bound = [m for m in made.get(fun.value, ()) if not (
                    id(call) in in_order and start(m) > start(call))]
                if bound:
                    self.nested_pmaps.update([id(call)] + list(map(id, bound)))
                    mapped_again.update(map(id, bound))
                else:
                    outer.setdefault(fun.value, []).append(call)
        inners = {id(inner) for _call, inner in stacked_calls.values()}
        for call, inner in stacked_calls.values():
            # two levels exactly: neither is inside another stack, nor maps a pmap itself
            if (id(call) in self.nested_pmaps or id(inner) in self.nested_pmaps
                    or id(call) in inners or id(inner) in stacked_calls):
                self.nested_pmaps.update((id(call), id(inner)))
            else:
                self.stacked_calls[id(call)] = inner
                self.stacked_calls_inner[id(inner)] = call
        decorated = {id(site): fn for fn in _walk(module, cst.FunctionDef)
                     for site in [d.decorator for d in fn.decorators] if self.site(site)}
        candidates = []   # (pmapped def, its pmap site, whether that is its decorator,
        #                    the pmaps in its body)
        for fn in _walk(module, cst.FunctionDef):
            # its own pmap decorator, else a pmap of its name (one run in order: below it)
            own = next((d.decorator for d in fn.decorators if self.site(d.decorator)), None)
            site = own or next((c for c in outer.get(fn.name.value, ()) if not (
                id(c) in in_order and start(c) < start(fn))), None)
            if site is None:
                continue
            # a pmap made in the body of a pmapped function, or a name bound to a pmap
            # called there: a pmap of a pmap
            inner = [n.decorator if isinstance(n, cst.Decorator) else n
                     for n in _walk(fn.body, (cst.Call, cst.Decorator))
                     if self.site(n.decorator if isinstance(n, cst.Decorator) else n)]
            inner += [m for call in _walk(fn.body, cst.Call) if isinstance(call.func, cst.Name)
                      for m in made.get(call.func.value, ())]
            for node in inner:
                self.nested_pmaps.update((id(site), id(node)))
            if inner:
                candidates.append((fn, site, site is own, list({id(n): n for n in inner}.values())))
        self._plan_nests(candidates, decorated, mapped_again)

    def _plan_nests(self, candidates, decorated, mapped_again):
        # Each pmap of a pmap the source says all of becomes shard_maps (nested_pmaps):
        # an outer def in no other nest, inner defs in no other nest nor outers themselves.
        outers = {id(fn) for fn, _, _, _ in candidates}
        claimed = {}
        for fn, _, _, inner in candidates:
            for node in inner:
                claimed[id(node)] = claimed.get(id(node), 0) + 1
        for fn, site, by_decorator, inner in candidates:
            functions = list({id(decorated[id(n)]): decorated[id(n)] for n in inner
                              if id(n) in decorated}.values())
            blockers = [
                (not by_decorator, "the outer pmap is not a decorator"),
                (id(site) in mapped_again, "a pmap maps the outer pmap again (three levels)"),
                (id(site) in claimed, "the outer pmap is itself in a pmapped body (three levels)"),
                (any(id(n) not in decorated for n in inner),
                 "an inner pmap is not a decorator on a def"),
                (any(claimed[id(n)] > 1 for n in inner),
                 "an inner pmap is called in two pmapped bodies"),
                (any(id(f) in outers for f in functions), "three levels of pmaps")]
            why = next((text for blocked, text in blockers if blocked), None)
            try:
                if why:
                    raise nested_pmaps.Unplanned(why)
                nest = nested_pmaps.plan(self.ctx, self, fn, functions)
                nest.axis_names = rules_pmap.nest_axis_names(self.ctx, nest)
            except (nested_pmaps.Unplanned, LeaveAsIs, KeepPmap) as exc:
                for node in [site, *inner]:
                    self.nest_unplanned[id(node)] = getattr(exc, "why", str(exc))
                continue
            self.nests[id(nest.decorator)] = nest
            for each in nest.inners:
                self.nest_inners[id(each.decorator)] = (nest, each)
                if each.closure:
                    self.nest_closures[id(each.function)] = each.closure
                    self.nest_closures.update((id(c), each.closure) for c in each.calls)

    # -- what the rules ask --------------------------------------------------------
    def is_nested(self, node):
        return id(node) in self.nested_pmaps

    def nested_why(self, node):
        """Why the pmap of a pmap ``node`` is part of stays as written."""
        why = self.nest_unplanned.get(id(node))
        return rules_pmap.NESTED + (f" (migrate translates a pmap-decorated def called in "
                                    f"a pmap-decorated def's body; here {why})" if why else "")

    def reference(self, node, q):
        """False unless ``node`` names ``jax.pmap``; then why it is kept (None: a
        pmap call or decorator handles it)."""
        if q != rules_pmap.PMAP:
            return False
        if id(node) in self.callees:
            return None
        return ("jax.pmap as a value: the pmap is made where it is called, which migrate "
                "does not follow")

    # -- the driver's hooks ----------------------------------------------------------
    def decorator(self, ctx, original, updated):
        """The decorators (texts) standing for the pmap decorator ``original``;
        None: not a pmap decorator; ``RemoveFromParent``: the outer's stand for it.
        Raises LeaveAsIs/KeepPmap with why."""
        node = original.decorator
        if id(node) not in self.decorators:
            return None
        if id(node) in self.stacked_inner:
            if self.stacked_inner[id(node)] is True:   # the outer's translation stands for both
                return cst.RemoveFromParent()
            raise LeaveAsIs(self.stacked_inner[id(node)] or rules_pmap.NESTED)
        try:
            if id(node) in self.nests:
                return rules_pmap.nest_outer_decorators(ctx, self.nests[id(node)])
            if id(node) in self.nest_inners:
                return rules_pmap.nest_inner_decorators(ctx, *self.nest_inners[id(node)])
            if id(node) in self.stacked_pmaps:
                inner = self.stacked_pmaps[id(node)]
                texts = rules_pmap.stacked_decorators(ctx, node, inner)
                self.stacked_inner[id(inner)] = True
                return texts
            return rules_pmap.decorator(ctx, node, updated.decorator,
                                        self.inline_defs.get(id(node)))
        except LeaveAsIs as exc:
            if id(node) in self.stacked_pmaps:
                self.stacked_inner[id(self.stacked_pmaps[id(node)])] = exc.why
            raise

    def leave_call(self, ctx, original, updated):
        """A call of a planned inner def: what it read from the outer body, passed to it."""
        passed = self.nest_closures.get(id(original))
        if not passed:
            return updated
        args = list(updated.args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(args=args + [cst.Arg(cst.Name(n)) for n in passed])

    def leave_function(self, ctx, original, updated):
        """A pmap-decorated def whose body takes the mapped axis off itself
        (``pmap_bodies``); an inner def of a planned pmap of a pmap: what it read
        from the outer body becomes its last parameters."""
        plan = self.inline_plans.get(id(original))
        if plan is not None:
            return pmap_bodies.rewrite(ctx, original, updated, plan, ctx.numpy_name)
        if id(original) in self.static_plans:
            site, static = self.static_plans[id(original)]
            # (libcst indents the decorator's continuation lines by the block it is in)
            static = dataclasses.replace(static, decorator=site.shard_map_decorator())
            return pmap_bodies.rewrite_static(ctx, original, updated, static, ctx.numpy_name)
        names = self.nest_closures.get(id(original))
        if not names:
            return updated
        params = list(updated.params.params)
        if params:
            params[-1] = params[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        params += [cst.Param(cst.Name(n)) for n in names]
        return updated.with_changes(params=updated.params.with_changes(params=params))

    def leave_statement(self, ctx, original, updated):
        """``name = jax.pmap(lambda ...)`` as a named def (text), else None."""
        first = original.body[0]
        if (len(original.body) == 1 and isinstance(first, cst.Assign)
                and id(first.value) in self.named_defs):
            return self.named_defs[id(first.value)]
        return None


def family():
    """The pmap family: ``rules_pmap``'s rules, planned by ``PmapPlan``."""
    return dataclasses.replace(rules_pmap.family(), plan=PmapPlan)
