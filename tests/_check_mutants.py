"""Mutants of ``pmapkit migrate --check``'s comparison and isolation, for
``python -P tests/migrate_mutations.py --check``: each is a set of text edits
to ``check.py`` (the comparison, the verdicts) or ``check_runs.py`` (the
copies, the runs), loaded in place of the module; ``tests/test_migrate_check.py``
must then fail (its real runs go through ``command.main`` in this process,
so they reach a mutant)."""
import os

from pmapkit.tools.migrate import check, check_runs

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "test_migrate_check.py")

#: (label, module, [(text, replacement)]): each text occurs once in the module.
MUTANTS = [
    # -- numbers
    ("integers within a tolerance", check,
     [(r'rb"|\d+[eE][-+]?\d+)(?![\d.])")', r'rb"|\d+[eE][-+]?\d+|\d+)(?![\d.])")')]),
    ("inf and nan within a tolerance", check,
     [(r'rb"|\d+[eE][-+]?\d+)(?![\d.])")', r'rb"|\d+[eE][-+]?\d+|inf|nan)(?![\d.])")'),
      ("    if math.isinf(x) or math.isinf(y):      # a literal past the float range: text\n"
       "        return False\n", "")]),
    ("a float past the range within a tolerance", check,
     [("    if math.isinf(x) or math.isinf(y):      # a literal past the float range: text\n"
       "        return False\n", "")]),
    ("a tolerance by default", check,
     [("    rtol: float = 0.0\n", "    rtol: float = 1e-5\n")]),
    ("numbers compared as numbers without a tolerance", check,
     [("        return self.rtol > 0 or self.atol > 0", "        return True")]),
    ("the text around numbers not compared", check,
     [('    if _FLOAT.sub(b"#", a) != _FLOAT.sub(b"#", b):\n        return False\n', "")]),
    ("atol ignored", check,
     [("options.atol + options.rtol * abs(x)", "options.rtol * abs(x)")]),
    ("rtol ignored", check,
     [("options.atol + options.rtol * abs(x)", "options.atol")]),
    ("rtol relative to the migrated value", check,
     [("options.atol + options.rtol * abs(x)", "options.atol + options.rtol * abs(y)")]),
    # -- lines
    ("line endings not compared", check,
     [("output.splitlines(keepends=True)", "output.splitlines()")]),
    ("missing lines not compared", check,
     [("    for k in range(max(len(a), len(b))):", "    for k in range(min(len(a), len(b))):")]),
    ("bytes that are not UTF-8 decoded strictly", check,
     [('data.decode("utf-8", "backslashreplace")', 'data.decode("utf-8")')]),
    ("the tolerance not echoed", check,
     [("        if not self.tolerant:\n            return \"byte for byte\"\n",
       "        return \"byte for byte\"\n")]),
    # -- --ignore
    ("--ignore matched at the start only", check,
     [("pattern.search(text)", "pattern.match(text)")]),
    ("--ignore on the original only", check,
     [("    b, skipped_b = kept_lines(out_migrated, options)",
       "    b, skipped_b = kept_lines(out_migrated, Options())")]),
    ("--ignore not said", check,
     [("    note = _skipped_note(options, skipped_a, skipped_b)", '    note = ""')]),
    # -- exit statuses, timeouts
    ("the migrated run's failure ignored", check,
     [("    if ran_migrated.returncode:", "    if False:")]),
    ("the original's failure ignored", check,
     [("    if ran_original.returncode:", "    if False:")]),
    ("the migrated run's timeout not said", check,
     [("    if ran_migrated.timed_out:", "    if False:")]),
    ("no timeout", check_runs,
     [("process.communicate(timeout=options.timeout)", "process.communicate(timeout=None)")]),
    ("no subreaper: a detached child outlives the run", check_runs,
     [("subprocess.Popen(reaped(command), ", "subprocess.Popen(command, ")]),
    ("the subreaper kills only the run's main process", check_runs,
     [("        left = descendants()\n", "        left = descendants() & {child}\n")]),
    ("each run its own hash seed", check_runs,
     [("    env = dict(os.environ, PYTHONHASHSEED=hash_seed())\n",
       "    env = dict(os.environ)\n")]),
    ("every DeprecationWarning an error", check_runs,
     [("        if _issued_by_jax():\n", "        if True:\n")]),
    ("JAX's deprecations not errors", check_runs,
     [("        if _issued_by_jax():\n", "        if False:\n")]),
    ("runpy's __loader__", check_runs,
     [("                     __loader__=importlib.machinery.SourceFileLoader(\"__main__\", script))",
       "                     __loader__=None)")]),
    ("control bytes shown raw", check,
     [("    return \"\".join(c if c.isprintable() else", "    return text or \"\".join(c if c.isprintable() else")]),
    ("a long line shown whole", check,
     [("    if len(text) <= WIDTH:\n", "    if True:\n")]),
    ("a long line cut at its start", check,
     [("    start = max(0, min(at - BEFORE, len(text) - WIDTH))", "    start = 0")]),
    # -- isolation
    ("runs in the user's folder", check_runs,
     [("            ran_original = run(original_command(os.path.join(where, script), args),\n"
       "                               where, options, env)",
       "            ran_original = run(original_command(os.path.join(where, script), args),\n"
       "                               root, options, env)"),
      ("            ran_migrated = run(migrated_command(os.path.join(where, script), args),\n"
       "                               where, options, env)",
       "            ran_migrated = run(migrated_command(os.path.join(where, script), args),\n"
       "                               root, options, env)")]),
    ("the user's files run", check_runs,
     [("original_command(os.path.join(where, script), args)",
       "original_command(os.path.join(root, script), args)")]),
    ("the second run in the first run's copy", check_runs,
     [("            _remove(where)\n            _make_copy(plan, where, _overlay",
       "            _make_copy(plan, where, _overlay"),
      ("    os.makedirs(where)\n", "    os.makedirs(where, exist_ok=True)\n")]),
    ("the migrated files not in place", check_runs,
     [("_make_copy(plan, where, _overlay(programs, root) + list(second))",
       "_make_copy(plan, where, list(second))")]),
    ("stdin inherited", check_runs,
     [("stdin=given if given is not None else subprocess.DEVNULL", "stdin=given")]),
    ("--stdin ignored", check_runs,
     [('given = open(options.stdin, "rb") if options.stdin else None', "given = None")]),
    ("no --copy-limit", check_runs,
     [("                if size > limit:", "                if False:")]),
    ("version-control folders copied", check_runs,
     [("            elif not (name in SKIPPED_FOLDERS", "            elif not (name in ()")]),
    ("a link leading out left relative", check_runs,
     [("    if not os.path.isabs(text) and _escapes(relative, text):", "    if False:")]),
]


def _load(module, source):
    exec(compile(source, module.__file__, "exec"), module.__dict__)


def mutate_check(only, run_tests):
    """[(label, failures)] of each mutant (``run_tests``: migrate_mutations')."""
    results = []
    for label, module, edits in MUTANTS:
        if only and not all(w in label for w in only):
            continue
        with open(module.__file__) as f:
            source = f.read()
        mutant = source
        for text, replacement in edits:
            assert source.count(text) == 1, (label, text, source.count(text))
            mutant = mutant.replace(text, replacement)
        _load(module, mutant)
        try:
            results.append((f"check: {label}", run_tests([TESTS], first_failure=True)))
        finally:
            _load(module, source)
    return results
