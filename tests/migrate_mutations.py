"""Mutation check of ``pmapkit migrate``'s rules (run by hand; pytest does not
collect it):

    python -P tests/migrate_mutations.py [--refusals] [--rules] [--translation] [--check] [-k WORDS]

Each mutant is run against the in-process migrate tests (the ``test_migrate_*``
files less the tests that start processes) and the failing tests are counted:

- ``--refusals``: each refusal branch of ``pmapkit/tools/migrate/rules_*.py``
  (a ``raise LeaveAsIs(...)`` / ``raise KeepPmap(...)``, a ``_flag(...)``
  check) replaced by ``pass``, the module's source run again in its own
  namespace. A first run records which lines of the rule modules each test
  executes; a mutant runs the tests that executed its statement (a test that
  never reaches it cannot see it: same code, same result);
- ``--rules``: each rule of the merged tables (a call, name, attribute rule,
  a move a family writes itself; the census's generated renames are data, not
  rules) taken out of ``transformer.tables()``; these stop at the first
  failing test (it is named) — a rule needs one test that fails without it;
- ``--translation``: each of ``TRANSLATION_MUTANTS`` (a planted bug in the pmap
  translation, the helpers written into files, ordered host_callback, the
  same-behaviour rewrites, the leftover scan) written over its file on disk,
  the translation tests run in a fresh process (``-x``; the helpers' source is
  read from disk, and the ordered-tap test runs its migrated file in a process
  of its own), the file restored.
- ``--check``: each mutant of ``--check``'s comparison and isolation in
  ``tests/_check_mutants.py`` (text edits to ``check.py``/``check_runs.py``:
  numbers, tolerance, ``--ignore``, exit statuses, timeouts, the copies, stdin)
  against ``tests/test_migrate_check.py``, stopping at its first failing test.

No flag: all four.

A mutant that no test kills is printed SURVIVED; the exit status is then 1.
"""
import argparse
import ast
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

from pmapkit.tools.migrate import (rules_classic_names, rules_export,  # noqa: E402
                                    rules_host_callback, rules_modern,
                                    rules_pjit, rules_placement, rules_pmap,
                                    rules_trees_ops, transformer)

RULE_MODULES = (rules_classic_names, rules_export, rules_host_callback, rules_modern, rules_pjit,
                rules_placement, rules_pmap, rules_trees_ops)
TEST_FILES = [os.path.join(HERE, f) for f in ("test_migrate_every_rule.py", "test_migrate_rules.py",
                                              "test_migrate_refusals.py",
                                              "test_migrate_honesty.py",
                                              "test_migrate_translate.py",
                                              "test_migrate_translate_host_callback.py",
                                              "test_migrate_pmap_forms.py")]
# Tests that start processes: slow, and a mutant in this process does not reach them.
IN_PROCESS = ("not every_family and not check_proves and not a_rewritten_dotted_name "
              "and not every_rule_has_a_sample and not one_at_a_time and not training_loop "
              "and not forms_programs")


class _Failures:
    """Counts failing tests; with ``trace``, records the lines of the rule
    modules each test executes (``lines``: nodeid -> {(file, line)})."""

    def __init__(self, trace=False):
        self.failed, self.passed, self.ran = set(), 0, 0
        self.trace, self.lines = trace, {}
        self.files = {m.__file__ for m in RULE_MODULES}

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid)
        elif report.when == "call" and report.passed:
            self.passed += 1

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        self.ran += 1
        if not self.trace:
            yield
            return
        seen = self.lines.setdefault(item.nodeid, set())

        def local(frame, event, arg):
            if event == "line":
                seen.add((frame.f_code.co_filename, frame.f_lineno))
            return local

        def tracer(frame, event, arg):
            return local if frame.f_code.co_filename in self.files else None
        sys.settrace(tracer)
        try:
            yield
        finally:
            sys.settrace(None)


def run_tests(selection=None, first_failure=False, trace=False):
    """The in-process tests' failures (``selection``: these node ids only);
    ``first_failure``: stop at the first."""
    counter = _Failures(trace)
    where = list(selection) if selection is not None else ["-k", IN_PROCESS, *TEST_FILES]
    if selection is not None and not where:
        return counter
    pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "--tb=no",
                 *(["-x"] if first_failure else []), *where], plugins=[counter])
    return counter


def refusal_branches(module):
    """[(line, end line, text)] of each refusal statement of ``module``."""
    with open(module.__file__) as f:
        source = f.read()
    found = []
    for node in ast.walk(ast.parse(source)):
        call = None
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            call = node.exc
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
        if call is None or not isinstance(call.func, ast.Name):
            continue
        if call.func.id in ("LeaveAsIs", "KeepPmap", "_flag"):
            text = source.splitlines()[node.lineno - 1].strip()
            found.append((node.lineno, node.end_lineno, text))
    return source, sorted(found)


def _load(module, source):
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    transformer.tables.cache_clear()


def mutate_refusals(only, baseline):
    results = []
    for module in RULE_MODULES:
        source, branches = refusal_branches(module)
        lines = source.splitlines()
        for start, end, text in branches:
            label = f"{module.__name__.rpartition('.')[2]}:{start} {text}"
            if only and not all(w in label for w in only):
                continue
            mutant = list(lines)
            indent = lines[start - 1][:len(lines[start - 1]) - len(lines[start - 1].lstrip())]
            mutant[start - 1] = indent + "pass  # mutant"
            for k in range(start, end):
                mutant[k] = ""
            reaching = [nodeid for nodeid, lines in baseline.lines.items()
                        if any((module.__file__, n) in lines for n in range(start, end + 1))]
            _load(module, "\n".join(mutant) + "\n")
            try:
                results.append((label, run_tests(reaching)))
            finally:
                _load(module, source)
    return results


def _own_test(table, key):
    """The node id of the sample test of a rule in test_migrate_every_rule."""
    test = ("test_each_move_rewrites_a_reference_and_an_import" if table == "moves"
            else "test_each_rule_rewrites_its_sample")
    return f"{os.path.join(HERE, 'test_migrate_every_rule.py')}::{test}[{key}]"


def mutate_rules(only):
    original = transformer.tables
    moves, names, calls, attributes, reasons = original()
    census_moves = set(rules_trees_ops.census_tables()[0])
    rules = ([("calls", k) for k in calls] + [("names", k) for k in names]
             + [("attributes", k) for k in attributes]
             + [("moves", k) for k in moves if k not in census_moves])
    results = []
    for table, key in rules:
        label = f"{table} {key}"
        if only and not all(w in label for w in only):
            continue

        def without(table=table, key=key):
            merged = dict(zip(("moves", "names", "calls", "attributes", "reasons"),
                              (dict(t) for t in original())))
            del merged[table][key]
            return tuple(merged.values())
        transformer.tables = without
        try:
            # the rule's own sample test first; failing that, any test
            counter = run_tests([_own_test(table, key)])
            if not counter.failed:
                counter = run_tests(first_failure=True)
            results.append((label, counter))
        finally:
            transformer.tables = original
    return results


MIGRATE = os.path.join(os.path.dirname(HERE), "pmapkit", "tools", "migrate")
TRANSLATION_TESTS = [os.path.join(HERE, f) for f in (
    "test_migrate_translate.py", "test_migrate_translate_host_callback.py",
    "test_migrate_pmap_forms.py", "test_migrate_rules.py",
    "test_migrate_refusals.py")]
# (file under pmapkit/tools/migrate, text, planted bug, label)
TRANSLATION_MUTANTS = [
    ("rules_pmap.py", "return f\"jax.P({'None, ' * axis}{name})\"", "return f\"jax.P({name})\"",
     "a spec ignores its axis (in_axes=1 read as 0)"),
    ("rules_pmap.py", "            in_axes = tuple(in_axes[k] for k in dynamic)\n", "",
     "in_axes not narrowed to the non-static arguments"),
    ("rules_pmap.py", 'return [f"mesh={mesh or self.mesh}", *self.spec_options(), "check_vma=False"]',
     'return [f"mesh={mesh or self.mesh}", *self.spec_options()]',
     "shard_map's varying-axes check left on"),
    ("rules_pmap.py", '            options.append(f"donate_argnums={_tuple_text(self.donate)}")',
     "            pass", "donate_argnums dropped"),
    ("rules_pmap.py", '            options.append(f"static_argnums={_tuple_text(self.static)}")',
     "            pass", "static_argnums dropped"),
    ("rules_pmap.py", 'self.mesh = f"jax.sharding.Mesh({sx.code(devices.value)}, ({self.name},))"',
     'self.mesh = f"jax.sharding.Mesh(jax.local_devices(), ({self.name},))"',
     "devices= ignored"),
    ("pmap_plan.py", "                self.nested_pmaps.update(map(id, sites))",
     "                pass", "stacked pmap decorators not a pmap of a pmap"),
    ("rules_pmap.py", '    if ctx.plans["pmap"].is_nested(original):', "    if False:",
     "a pmap of a pmap translated"),
    ("rules_pmap.py", '            if ctx.plans["pmap"].meshes_follow_arguments:', "            if True:",
     "_first_devices written for every single pmap site (issue 49: at most 25 lines)"),
    ("rules_pmap.py", "    ctx.need_helper(helpers.FIRST_DEVICES)\n    spec = f", "    spec = f",
     "stacked pmaps' mesh cut without _first_devices written"),
    ("rules_pmap.py", '        "_per_device", "_per_device"]', '        "_per_device"]',
     "stacked pmaps' body given one leading axis removed"),
    ("rules_pmap.py", '    spec = f"jax.P({names[0]}, {names[1]})"',
     '    spec = f"jax.P({names[1]}, {names[0]})"', "stacked pmaps' axes swapped"),
    ("rules_pmap.py", '    if ctx.plans["pmap"].is_nested(outer):', "    if False:",
     "stacked pmaps over a body making a pmap translated"),
    ("pmap_plan.py", "                return cst.RemoveFromParent()",
     "                return updated_node", "the inner of stacked pmaps kept beside the 2-D one"),
    ("pmap_plan.py", "                self.stacked_inner[id(self.stacked_pmaps[id(node)])] = exc.why",
     "                pass", "the inner of stacked pmaps left without the outer's reason"),
    ("pmap_plan.py", "                    id(call) in in_order and start(m) > start(call))]",
     "                    False)]", "a name mapped above its pmap binding taken as that pmap"),
    ("pmap_plan.py", "            inner += [m for call in _walk(fn.body, cst.Call) if isinstance("
     "call.func, cst.Name)", "            inner += [m for call in _walk(fn.body, cst.Call) if False",
     "a pmapped name called in a pmapped body translated"),
    ("pmap_plan.py", "            site = own or next(", "            site = next(",
     "a def's own pmap decorator not its site"),
    ("written.py", "                sizes.setdefault(name, numpy.shape(leaf)[dim])",
     "                sizes.setdefault(name, mesh.shape[name])",
     "the mesh not cut to the mapped size"),
    ("written.py", "        if count > mesh.devices.size:", "        if False:",
     "a size over the device count without classic's error"),
    ("written.py", "        devices = numpy.reshape(mesh.devices.flat[:count], shape)",
     "        devices = numpy.reshape(mesh.devices.flat[-count:], shape)",
     "the last devices, not the first"),
    ("rules_pmap.py", "    if _literal(name.value):\n        return None\n    raise KeepPmap(",
     "    if _literal(name.value):\n        return None\n    return None\n    raise KeepPmap(",
     "an axis name computed at run time translated"),
    ("rules_pmap.py", "    if _literal(name.value):\n        return None\n",
     "    if _literal(name.value):\n        raise KeepPmap('a literal')\n",
     "a literal non-string axis name kept as if computed at run time"),
    ("written.py", "args = list(per_leaf(in_axes, args, jax.numpy.squeeze))",
     "args = list(per_leaf(in_axes, args, lambda v, a: v[0]))",
     "the device axis taken by indexing (a longer block silently sliced)"),
    ("written.py", "return per_leaf(out_axes, fun(*args), jax.numpy.expand_dims)",
     "return per_leaf(out_axes, fun(*args), lambda v, a: jax.numpy.expand_dims(v, 0))",
     "out_axes ignored"),
    ("written.py", "            args.insert(position, value)", "            pass",
     "statics not handed back"),
    ("written.py", "jax.experimental.io_callback(run, None, arg, _device_index(), ordered=True)",
     "jax.debug.callback(run, arg, _device_index())", "taps unordered (jax.debug.callback)"),
    ("written.py", "        with _lock:\n            device = {\"device\": jax.local_devices()"
     "[int(index)]} if tap_with_device else {}\n            try:",
     "        if True:\n            device = {\"device\": jax.local_devices()[int(index)]} "
     "if tap_with_device else {}\n            try:", "taps not one at a time"),
    ("written.py", "                tap_func(jax.tree.map(numpy.asarray, value), (), **device)",
     "                tap_func(value, (), **device)", "taps handed jax.Arrays, not numpy"),
    ("written.py", "            except Exception:\n                logging.getLogger",
     "            except ZeroDivisionError:\n                logging.getLogger",
     "a raising tap ends the program"),
    ("written.py", "        return jax.experimental.io_callback(run, result_shape, arg, _device_index(),"
     "\n                                            ordered=True)",
     "        return jax.pure_callback(run, result_shape, arg, _device_index())",
     "a call as pure_callback (dropped when unused)"),
    ("written.py", "    return jax.lax.axis_index(axes) if axes else numpy.int32(0)",
     "    return numpy.int32(0)", "the device index always 0"),
    ("rules_host_callback.py", "    return bool(names) and all(id(n) in ids for n in names)",
     "    return True", "call_with_device translated whatever the device is used for"),
    ("transformer.py", "            return isinstance(node.func, cst.Name) and node.func.value in "
     "self.mesh_functions", "            return False", "a mesh from a function not entered"),
    ("transformer.py", "            return node.attr.value in self.mesh_attributes",
     "            return False", "a mesh from an attribute not entered"),
    ("transformer.py", "                and original_node.func.attr.value == rules_classic_names.TO_PY):",
     "                and False):", "x.to_py() kept"),
    ("transformer.py", "        if len(original_node.body) == 1 and self._dropped(original_node.body[0]):",
     "        if False:", "config.enable_omnistaging() kept"),
    ("transformer.py", "                and self.qualname(original_node.value.func) in "
     "rules_classic_names.BACKEND_PLATFORM):", "                and False):",
     "get_backend().platform kept"),
    ("transformer.py", "            if target is not None and \".\" not in target:",
     "            if False:", "optix import kept"),
    ("leftovers.py", "        return config_attr(q.split(\".\")[2])", "        return None",
     "a removed config attribute read not flagged"),
    ("leftovers.py", "                    self._add(node, config_option(value.evaluated_value))",
     "                    pass", "a removed config option set not flagged"),
    ("leftovers.py", "            self._add(node, array_member(sx.code(node.attr)))",
     "            pass", "a classic array method not flagged"),
    ("leftovers.py", "    if attr in _lacking_array_members() or (attr in _ARRAY_GONE",
     "    if attr in _lacking_array_members() or (False", "DeviceArray's own methods not flagged"),
    ("leftovers.py", "                return       # runs only where this JAX has it (hasattr/callable)",
     "                pass", "a guarded name flagged"),
    ("leftovers.py", "            return False         # the program's own attribute of a module",
     "            pass", "a program's own module attribute flagged"),
    ("written.py", "            if mesh is None or not jax.sharding.get_abstract_mesh().empty:",
     "            if mesh is None:", "the global mesh setting's mesh over a with's own"),
    ("written.py", "    _thread.mesh = mesh", "    pass", "the global mesh setting not kept"),
    ("written.py", "_thread=threading.local()", "_thread=threading.Thread()",
     "the global mesh setting kept for every thread"),
    ("written.py", "        wrapped.lower = under(jitted.lower)", "        pass",
     "a pjit's lower without the global mesh setting's mesh"),
    ("rules_pjit.py", "    if ctx.resource_mesh:", "    if False:",
     "a pjit after the global mesh setting not given its mesh"),
    ("rules_pjit.py", "        if q in RESOURCE_ENVS:", "        if False:",
     "a read of thread_resources.env not keeping the global mesh setting left"),
    ("rules_pjit.py", "            if why is not None:\n                return why",
     "            if False:\n                return why",
     "a pjit left beside a global mesh setting translated"),
    ("rules_pjit.py", 'sx.value(env, "loops", "()") not in ("()", "[]")', "False",
     "a global mesh setting with xmap loops translated"),
    ("rules_pjit.py", "        if id(node) in imported or id(node) in targets:",
     "        if id(node) in imported:", "the global mesh setting taken for a read of it"),
    ("rules_pjit.py", "        if q in PJIT_NAMES and id(node) not in decorators:",
     "        if q in PJIT_NAMES:", "a bare @pjit keeping the global mesh setting left"),
    ("rules_pjit.py", "            if id(node) not in calls:\n                return",
     "            if False:\n                return",
     "a pjit named, not called, taken as a call beside a global mesh setting"),
    ("transformer.py", "            self.frames[-1].clear()", "            pass",
     "the global mesh setting's parts still said left"),
    # a pmap-decorated def called in a pmapped body (nested_pmaps)
    ("nested_pmaps.py", "    return tuple(sorted(found, key=found.get))", "    return ()",
     "nested: what the inner def reads from the outer body not passed"),
    ("pmap_plan.py", "        if not passed:\n            return updated\n        args", "        if True:\n            return updated\n        args",
     "nested: the inner def's calls not given what it reads"),
    ("pmap_plan.py", "        names = self.nest_closures.get(id(original))\n        if not names:",
     "        names = None\n        if not names:", "nested: the inner def not given parameters"),
    ("rules_pmap.py", "        site.in_axes = tuple(given) + (None,) * len(inner.closure)",
     "        site.in_axes = tuple(given) + (0,) * len(inner.closure)",
     "nested: what the inner def reads mapped over the inner axis"),
    ("rules_pmap.py", '               f"axis_names={{{outer}}}", "check_vma=False"]',
     '               "check_vma=False"]', "nested: the outer shard_map manual over both axes"),
    ("rules_pmap.py", '    options = [*site.spec_options(), f"axis_names={{{name}}}", "check_vma=False"]',
     '    options = [*site.spec_options(), "check_vma=False"]',
     "nested: the inner shard_map without its axis"),
    ("written.py", "        shape = [sizes.get(name, max(mesh.devices.size // named, 1)) for name in "
     "mesh.axis_names]", "        shape = [sizes.get(name, 1) for name in mesh.axis_names]",
     "nested: the inner axis not given the devices left"),
    ("nested_pmaps.py", "            if call is None:\n", "            if False:\n",
     "nested: an inner def used other than called translated"),
    ("nested_pmaps.py", "                if any(getattr(r, \"scope\", None) is not outer_scope",
     "                if False and any(getattr(r, \"scope\", None) is not outer_scope",
     "nested: a call seeing another binding of what the inner def reads translated"),
    ("nested_pmaps.py", "            _positional_only(function)\n", "",
     "nested: an inner def with defaults given parameters after them"),
    ("nested_pmaps.py", '        raise Unplanned("more than one pmap decorator")', "        pass",
     "nested: stacked decorators planned as one nest site"),
    ("pmap_plan.py", "                (id(site) in mapped_again,", "                (False,",
     "nested: an outer pmap mapped again translated"),
    ("pmap_plan.py", "                (id(site) in claimed,", "                (False,",
     "nested: an outer pmap inside another pmapped body translated"),
    ("pmap_plan.py", "                (any(claimed[id(n)] > 1 for n in inner),",
     "                (False,", "nested: an inner pmap called in two pmapped bodies translated"),
    ("rules_pmap.py", '        raise Unplanned("the inner and outer pmaps name one axis")', "        pass",
     "nested: inner and outer of one axis name translated"),
    ("rules_pmap.py", '            raise Unplanned(f"{what} has statics or devices=")', "            pass",
     "nested: statics translated"),
    # a pmap of a pmap written inline
    ("pmap_plan.py", "                    stacked_calls[id(call)] = (call, fun)",
     "                    self.nested_pmaps.update((id(call), id(fun)))",
     "inline: jax.pmap(jax.pmap(f)) left"),
    ("rules_pmap.py", "        _stacked_names(ctx, [_bind(outer, _PARAMS), bound])\n        return None",
     "        return None", "inline: the inner of an untranslatable inline stack not left"),
    ("rules_pmap.py", '    body = f"_per_device(_per_device({sx.code(inner[\'fun\'].value)}))"',
     '    body = f"_per_device({sx.code(inner[\'fun\'].value)})"',
     "inline: the body given one leading axis removed"),
    # a file mapping a size written as a number (mapped_sizes)
    ("mapped_sizes.py", "            return True\n    return False", "            return False\n    return False",
     "mapped sizes: a literal size at a pmap call not evidence"),
    ("mapped_sizes.py", "                isinstance(a.value, cst.Name) and a.value.value in sized)",
     "                False)", "mapped sizes: a name assigned a literal-sized array not evidence"),
    ("mapped_sizes.py", "        shape = positional[1] if len(positional) > 1 else None",
     "        shape = None", "mapped sizes: random.split(key, 4) not evidence"),
    ("rules_pmap.py", '            self.mesh = f"jax.sharding.Mesh({sx.code(devices.value)}, ({self.name},))"\n',
     '            self.mesh = f"jax.sharding.Mesh({sx.code(devices.value)}, ({self.name},))"\n'
     '            self.cut = True\n',
     "mapped sizes: a site over given devices cut too"),
    # an import of a gone name nothing reads (transformer)
    ("transformer.py", "    if unread:\n        new = file_imports.drop_imports(new, unread, report)", "    pass",
     "an unread import of a gone name kept"),
    ("file_imports.py", "    return {q: visitor.lines.get(q, 0) for _m, _o, _a, q in found if q not in kept}",
     "    return {q: visitor.lines.get(q, 0) for _m, _o, _a, q in found}",
     "a read import of a gone name dropped"),
    ("file_imports.py", "    for q in sorted(dropped, key=unread.get):",
     "    for q in sorted(unread, key=unread.get):",
     "an unread import a rule moved said dropped too"),
    ("transformer.py", "            self._keep_comments(updated_node, text)\n            return updated_node."
     "with_changes(body=[cst.Expr(", "            return updated_node.with_changes(body=[cst.Expr(",
     "a comment in the global mesh setting dropped"),
]


def mutate_translation(only):
    results = []
    for name, text, bug, label in TRANSLATION_MUTANTS:
        label = f"translation {name}: {label}"
        if only and not all(w in label for w in only):
            continue
        path = os.path.join(MIGRATE, name)
        with open(path) as f:
            source = f.read()
        if source.count(text) != 1:
            raise SystemExit(f"mutant text not found once in {name}: {text!r}")
        counter = _Failures()
        try:
            with open(path, "w") as f:
                f.write(source.replace(text, bug))
            proc = subprocess.run([sys.executable, "-P", "-m", "pytest", "-x", "-q",
                                   "-p", "no:cacheprovider", "--no-header", "--tb=no",
                                   *TRANSLATION_TESTS], capture_output=True, text=True,
                                  timeout=1800, cwd=os.path.dirname(HERE))
        finally:
            with open(path, "w") as f:
                f.write(source)
        failed = [line.split(" ")[1] for line in proc.stdout.splitlines()
                  if line.startswith("FAILED ")]
        counter.failed.update(failed or ([] if proc.returncode == 0 else ["(the run failed)"]))
        counter.ran = 1
        results.append((label, counter))
    return results


def main(argv):
    parser = argparse.ArgumentParser(prog="python -P tests/migrate_mutations.py")
    parser.add_argument("--refusals", action="store_true")
    parser.add_argument("--rules", action="store_true")
    parser.add_argument("--translation", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("-k", nargs="*", default=[], help="only mutants whose label has these")
    args = parser.parse_args(argv)
    sys.path.insert(0, HERE)
    every = not (args.refusals or args.rules or args.translation or args.check)
    results = []
    if args.refusals or args.rules or args.translation or every:
        baseline = run_tests(trace=True)
        if baseline.failed:
            print(f"the tests fail without a mutant: {sorted(baseline.failed)}")
            return 2
        if args.refusals or every:
            results += mutate_refusals(args.k, baseline)
        if args.rules or every:
            results += mutate_rules(args.k)
        if args.translation or every:
            results += mutate_translation(args.k)
        print(f"\nbaseline: {baseline.passed} in-process tests pass")
    if args.check or every:
        import _check_mutants
        check_baseline = run_tests([_check_mutants.TESTS])
        if check_baseline.failed:
            print(f"the --check tests fail without a mutant: {sorted(check_baseline.failed)}")
            return 2
        results += _check_mutants.mutate_check(args.k, run_tests)
        print(f"\n--check baseline: {check_baseline.passed} tests pass")
    print("refusal mutants: failing / tests run (those reaching the statement); "
          "rules: failing (the rule's own sample test, else the first failing test)")
    survived = 0
    for label, counter in results:
        n = len(counter.failed)
        survived += n == 0
        first = f"  (first: {sorted(counter.failed)[0].rpartition('::')[2][:60]})" \
            if label.startswith(("calls", "names", "attributes", "moves", "translation", "check:")) \
            and n else ""
        print(f"{'SURVIVED' if n == 0 else 'killed':>8}  {n:>3} failing / {counter.ran:>3} "
              f"run  {label}{first}")
    print(f"{len(results)} mutants, {len(results) - survived} killed, {survived} survived")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
