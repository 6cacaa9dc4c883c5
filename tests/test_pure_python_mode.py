"""The compiled and the pure-Python dispatch core must behave the same.

``PMAPKIT_PUREPYTHON=1`` is read once, at import, so the pure build can only
be exercised in a fresh interpreter: the dispatch, error, cache and
host-value suites are re-run, whole files, in a subprocess with the variable
set.
"""
import importlib.machinery
import os
import re
import shutil
import subprocess
import sys

import pytest

import pmapkit
from pmapkit.core.hitpath import _pure_notice
import pmapkit.core.hitpath._compiled  # noqa: F401  (loaded on first use by `import pmapkit`)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(REPO, "pmapkit")
PURE_ENV = dict(os.environ, PMAPKIT_PUREPYTHON="1")

# The child sets the variable; skipping when it is already set keeps a
# pure-mode run of this file from spawning itself again.
needs_unset = pytest.mark.skipif(
    "PMAPKIT_PUREPYTHON" in os.environ,
    reason="PMAPKIT_PUREPYTHON already set (avoid recursion)")


#: Whole test files (never a selection of their tests: a test added to one
#: runs on both builds), re-run on the pure build in two groups.
CORE_SUITES = [
    "tests/test_dispatch.py", "tests/test_dispatch_several_leaves.py",
    "tests/test_pmap_errors.py",
    "tests/test_input_origins.py", "tests/test_miss_failures.py",
    "tests/test_donation_moved_alias.py",
    # The key format, the one rules, the one LRU order.
    "tests/test_cache_keys.py", "tests/test_cache_eviction.py",
    "tests/test_debugging_tools.py",
    # The core's shared caches (wrappers of one function).
    "tests/test_fresh_wrappers.py",
    # The probes of JAX's internals: features off, the generic path right.
    "tests/test_jax_probes.py",
]
HOST_SUITES = [
    # Host values on the hit path: JAX's call of the program, HostSpec puts,
    # and the value read at the call on every route.
    "tests/test_host_route.py", "tests/test_host_inputs.py", "tests/test_host_express.py",
    "tests/test_inputs_at_call.py", "tests/test_held_scalars.py",
]


def _run_pure(paths):
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths],
        cwd=REPO, env=PURE_ENV, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert " passed" in out and " failed" not in out, out[-2000:]
    # Whole files: nothing of them deselected or skipped for this build.
    assert " deselected" not in out and " skipped" not in out, out[-2000:]


@needs_unset
def test_dispatch_and_error_suites_pass_in_pure_python_mode():
    _run_pure(CORE_SUITES)


@needs_unset
def test_host_value_suites_pass_in_pure_python_mode():
    _run_pure(HOST_SUITES)


def test_the_reruns_name_whole_files_that_exist():
    for path in CORE_SUITES + HOST_SUITES:
        assert "::" not in path and " -k" not in path, path
        assert os.path.isfile(os.path.join(REPO, path)), path


#: What a suite reads of the core's entries (its counters, the shared caches,
#: the host route): such a suite tests the core, so it runs on both builds.
LOOKS_INSIDE = re.compile(
    r"_debug_dispatch_stats|\._shared\b|host_specs|\.host_call\b|HostSpec|host_refusal")
NOT_RERUN = {
    "tests/test_pure_python_mode.py": "this file",
    "tests/test_compiled_signatures.py": "reads the sources' text, runs neither build",
    "tests/test_long_runs.py": "processes of their own for minutes; its LRU checks "
                               "are test_cache_eviction's on both builds",
    "tests/test_multiprocess_pjit.py": "launches processes of its own for minutes",
}


def test_every_suite_looking_into_the_core_reruns_pure():
    rerun = set(CORE_SUITES + HOST_SUITES)
    missing = []
    for name in sorted(os.listdir(os.path.join(REPO, "tests"))):
        path = f"tests/{name}"
        if not (name.startswith("test_") and name.endswith(".py")) or path in NOT_RERUN:
            continue
        with open(os.path.join(REPO, path)) as f:
            if LOOKS_INSIDE.search(f.read()) and path not in rerun:
                missing.append(path)
    assert missing == [], f"suites testing the core, run on the compiled build only: {missing}"


@needs_unset
def test_pure_python_mode_loads_the_sources():
    code = ("import pmapkit, pmapkit.core.hitpath._compiled as c; "
            "print(pmapkit.COMPILED); print(c.dispatch.__file__); "
            "print(c.shard_arg.__file__)")
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=REPO, env=PURE_ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    compiled, dispatch_file, shard_file = proc.stdout.split()
    assert compiled == "False"
    assert dispatch_file.endswith("_dispatch.py")
    assert shard_file.endswith("_shard_arg.py")


def _extension_next_to_sources(name):
    # The build in use: the installed one when the checkout has no extensions.
    pkg = os.path.dirname(pmapkit.core.hitpath._compiled.__file__)
    return any(os.path.exists(os.path.join(pkg, name + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def test_compiled_when_extensions_exist():
    if os.environ.get("PMAPKIT_PUREPYTHON", "") not in ("", "0"):
        pytest.skip("this process runs the pure-Python build on purpose")
    # COMPILED needs both hot-path extensions.
    if not (_extension_next_to_sources("_dispatch")
            and _extension_next_to_sources("_shard_arg")):
        pytest.skip("no compiled extensions in the pmapkit build in use")
    assert pmapkit.COMPILED is True
    assert os.path.splitext(pmapkit.core.hitpath._compiled.dispatch.__file__)[1] in (".so", ".pyd")


def _uncompiled_checkout(tmp_path):
    """A checkout before its build: setup.py beside a copy of the package
    without its compiled extensions."""
    installed = os.path.dirname(os.path.abspath(pmapkit.__file__))
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    shutil.copytree(installed, tmp_path / "pmapkit", ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or n.endswith(suffixes)])
    (tmp_path / "setup.py").write_text("raise SystemExit('not run here')\n")
    return tmp_path


_FIRST_USE = """
import sys, numpy as np, pmapkit
print("imported", flush=True); print("--", file=sys.stderr, flush=True)
for k in range(2):
    pmapkit.pmap(lambda x: x * k)(np.ones((1, 2), np.float32))
print(pmapkit.__file__, pmapkit.COMPILED)
"""


def test_the_pure_build_run_unasked_says_so_once_at_first_use(tmp_path):
    """From an uncompiled checkout the pure build runs unasked: nothing at
    ``import pmapkit``, one line on stderr at its first use (not one per
    call), none with PMAPKIT_PUREPYTHON=1. Where a compiled pmapkit is
    installed the line names it and says how to reach it, and that works:
    ``python -P`` from the same folder runs the compiled build, silently."""
    folder = _uncompiled_checkout(tmp_path)
    unasked = {k: v for k, v in os.environ.items() if k != "PMAPKIT_PUREPYTHON"}
    for env, said in ((unasked, True), (dict(unasked, PMAPKIT_PUREPYTHON="1"), False)):
        # ``python -c`` from the folder, as a reader in a checkout runs it.
        proc = subprocess.run([sys.executable, "-c", _FIRST_USE], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split() == [
            "imported", str(folder / "pmapkit" / "__init__.py"), "False"]
        at_import, _, at_use = proc.stderr.partition("--\n")
        assert at_import == ""
        lines = at_use.splitlines()
        if not said:
            assert lines == [], proc.stderr
            continue
        assert len(lines) == 1 and lines[0].startswith("pmapkit: pure-Python build"), lines
        installed = _pure_notice.installed_package_dir()
        if installed and _pure_notice.compiled_in(installed):
            assert f"a compiled pmapkit is installed ({installed})" in lines[0]
            assert "`python -P`" in lines[0]
            shadowless = subprocess.run([sys.executable, "-P", "-c", _FIRST_USE], cwd=folder,
                                        env=env, capture_output=True, text=True, timeout=300)
            assert shadowless.returncode == 0, shadowless.stderr[-2000:]
            assert shadowless.stdout.split()[-1] == "True"
            assert shadowless.stderr == "--\n"


def test_the_notice_advises_what_works_in_the_checkout(tmp_path):
    # With no compiled install elsewhere, a checkout is built in place: by
    # setup.py where Cython is there, else by the editable install that
    # brings it (the README's venv has none).
    folder = _uncompiled_checkout(tmp_path)
    package = str(folder / "pmapkit")
    assert _pure_notice.advice(package, None, cython_available=True) == (
        f"build it in {folder}: `python setup.py build_ext --inplace`")
    assert _pure_notice.advice(package, None, cython_available=False) == (
        f"build it in {folder}: `pip install -e \".[test,dev]\"` (this environment has no Cython)")
    # An install of the same folder, or an uncompiled one, is nothing to reach for.
    assert _pure_notice.advice(package, package, True).startswith("build it in")
    other = tmp_path / "elsewhere" / "pmapkit"
    shutil.copytree(package, other)
    assert _pure_notice.advice(package, str(other), True).startswith("build it in")
    for name in ("_dispatch", "_shard_arg"):
        (other / "core" / "hitpath" / (name + importlib.machinery.EXTENSION_SUFFIXES[0])).touch()
    assert _pure_notice.advice(package, str(other), False).startswith(
        f"a compiled pmapkit is installed ({other})")
    # Outside a checkout (no setup.py): a wheel, not a build.
    (folder / "setup.py").unlink()
    assert "pip install --force-reinstall" in _pure_notice.advice(package, None, True)


def test_the_compiled_build_says_nothing(tmp_path):
    if not pmapkit.COMPILED:
        pytest.skip("this pmapkit runs its pure build")
    proc = subprocess.run([sys.executable, "-P", "-c", "import pmapkit; print(pmapkit.COMPILED)"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "True", "")
