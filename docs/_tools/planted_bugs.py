"""Planted bugs and the tests that kill them (issue 59's list, and the front
door's): each bug is written into its source file in this checkout, the test
that must catch it runs on the pure build (no rebuild needed), and the file is
restored (in a ``finally``; the files must be clean in git first). Then the
same test files run unmutated. Prints one line per bug.

    python docs/_tools/planted_bugs.py [WORD ...]   # only the bugs whose name has a WORD
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
MUTANTS = [
    ("negative out_axes off by one", "pmapkit/pmap/_pmap.py",
     "norm = ax + ndim + 1 if ax < 0 else ax", "norm = ax + ndim if ax < 0 else ax",
     ["tests/test_pmap_parity.py", "-k", "negative_out_axes"]),
    ("_hashed_index ignores a slice's stop", "pmapkit/legacy/global_device_array.py",
     "hash(tuple((s.start, s.stop) for s in index))", "hash(tuple((s.start,) for s in index))",
     ["tests/test_legacy_real_use_served.py"]),
    ("the room checker sees no arrow up", "tests/test_import_graph.py",
     "elif here is not None and there in rooms and rooms.index(there) > rooms.index(here):",
     "elif here is not None and there in rooms and rooms.index(there) > rooms.index(here) + 99:",
     ["tests/test_import_graph.py"]),
    ("an arrow up in the core (keys imports misses)", "pmapkit/core/keys/caches.py",
     None, "\n\ndef _planted():\n    import pmapkit.core.misses.calls  # noqa\n",
     ["tests/test_import_graph.py", "-k", "rooms"]),
    ("the refusal rule no longer checks for a self-naming replacement", "pmapkit/legacy/replacements.py",
     "    if record.name in names or any(", "    if False and (record.name in names) or False and any(",
     ["tests/test_legacy_refusal_facts.py", "-k", "bad_refusal"]),
    ("a real refusal names the removed name as its replacement", "pmapkit/legacy/names.py",
     'Removed("jax.soft_pmap", "jax.vmap(f, in_axes, axis_name=axis_name)"',
     'Removed("jax.soft_pmap", "jax.soft_pmap(f, in_axes, axis_name=axis_name)"',
     ["tests/test_legacy_refusal_facts.py", "-k", "names_a_replacement_this_jax_has"]),
    ("install() echoes its whole tuple at the prompt", "pmapkit/legacy/installed_names.py",
     "    def __repr__(self):\n", "    def __repr__(self):\n        return tuple.__repr__(self)\n",
     ["tests/test_legacy_install_value.py"]),
    ("the uncompiled build runs silently from Python", "pmapkit/core/hitpath/_compiled.py",
     "    if PURE_PYTHON_REQUESTED or COMPILED:\n        return", "    if True:\n        return",
     ["tests/test_pure_python_mode.py", "-k", "says_so_once"]),
    ("a missing jax is a traceback", "pmapkit/tools/cli.py",
     "            if exc.name not in NEEDED_DISTRIBUTIONS:\n                raise",
     "            if True:\n                raise",
     ["tests/test_cli_habits.py", "-k", "without_jax_the_command"]),
    ("--report lists no jax.pmap unless routed", "pmapkit/legacy/report.py",
     "        atexit.register(_print_at_exit)\n        _count_jax_pmap()",
     "        atexit.register(_print_at_exit)",
     ["tests/test_legacy_report_pmap.py"]),
]


def run(args):
    env = dict(os.environ, PMAPKIT_PUREPYTHON="1")
    t = time.time()
    p = subprocess.run([PY, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *args],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    last = [line for line in p.stdout.splitlines() if line.strip()][-1]
    return p.returncode, last, time.time() - t


def _clean(paths):
    out = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    if out.strip():
        sys.exit(f"planted_bugs: commit or stash these first, they are restored from "
                 f"what is on disk:\n{out}")


_clean([m[1] for m in MUTANTS])
ONLY = sys.argv[1:]
for name, path, old, new, test in MUTANTS:
    if ONLY and not any(o in name for o in ONLY):
        continue
    if test is None:
        continue
    full = os.path.join(ROOT, path)
    src = open(full).read()
    assert old is None or src.count(old) >= 1, (name, old)
    try:
        open(full, "w").write(src + new if old is None else src.replace(old, new, 1))
        rc, last, dt = run(test)
    finally:
        open(full, "w").write(src)
    print(f"{name} | {path} | {' '.join(test)} | rc {rc}: {last} ({dt:.0f} s)", flush=True)
rc, last, dt = run(["tests/test_import_graph.py", "tests/test_legacy_real_use_served.py", "tests/test_legacy_refusal_facts.py", "tests/test_legacy_install_value.py", "tests/test_cli_habits.py", "tests/test_legacy_report_pmap.py", "tests/test_pmap_parity.py", "-k", "not dispatch_and_error and not host_value"])
print("unmutated:", rc, last)
