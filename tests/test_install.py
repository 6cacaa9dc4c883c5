"""The suite tests what users get: the installed build, from any directory."""
import os
import subprocess
import sys
import sysconfig

import pytest

import _install
import pmapkit

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
EDITABLE = _install.editable_source() is not None
not_editable = pytest.mark.skipif(EDITABLE, reason="editable install: the checkout is the install")


def _run_elsewhere(args, tmp_path, **env):
    """Run ``args`` with the current directory outside the checkout."""
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, **env))


def test_pmapkit_under_test_is_the_installed_build():
    assert _install.shadowing_problem() is None
    if not EDITABLE:
        assert _install.package_dir() != os.path.realpath(_install.CHECKOUT_PACKAGE)


def test_compiled_core_in_ci():
    if not IN_CI:
        pytest.skip("CI=true is not set: a source build may be pure-Python on purpose")
    if os.environ.get("PMAPKIT_PUREPYTHON", "") not in ("", "0"):
        pytest.skip("this process runs the pure-Python build on purpose")
    assert pmapkit.COMPILED is True


@not_editable
def test_every_module_of_the_checkout_is_installed():
    if not os.path.isdir(_install.CHECKOUT_PACKAGE):
        pytest.skip("no source tree beside the tests; set PMAPKIT_CHECKOUT")
    installed = _install.package_dir()
    missing = []
    for root, dirs, files in os.walk(_install.CHECKOUT_PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(root, _install.CHECKOUT_PACKAGE)
        for name in files:
            if name.endswith((".py", ".pxd", ".pyi")) or name == "py.typed":
                if not os.path.exists(os.path.join(installed, rel, name)):
                    missing.append(os.path.normpath(os.path.join(rel, name)))
    assert not missing, f"not installed: {missing}"


def test_imports_from_another_directory(tmp_path):
    code = ("import pmapkit, pmapkit.core.rules, pmapkit.tools.cli; "
            "print(pmapkit.__file__); print(pmapkit.COMPILED)")
    proc = _run_elsewhere([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, compiled = proc.stdout.split()
    assert os.path.realpath(where) == os.path.realpath(pmapkit.__file__)
    assert compiled == str(pmapkit.COMPILED)


def _console_script():
    path = os.path.join(sysconfig.get_path("scripts"), "pmapkit")
    if not os.path.exists(path):
        pytest.skip(f"no pmapkit console script at {path}")
    return path


def test_console_script_help(tmp_path):
    proc = _run_elsewhere([_console_script(), "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pmapkit demo" in proc.stdout and "pmapkit bench" in proc.stdout


def test_console_script_rejects_unknown_command(tmp_path):
    proc = _run_elsewhere([_console_script(), "frobnicate"], tmp_path)
    assert proc.returncode == 2
    assert "unknown command 'frobnicate'" in proc.stderr


def test_demo_runs_from_another_directory(tmp_path):
    proc = _run_elsewhere([_console_script(), "demo"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "pmapkit.pmap and jax.pmap agree" in proc.stdout


def test_python_dash_m_from_another_directory(tmp_path):
    proc = _run_elsewhere([sys.executable, "-m", "pmapkit", "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pmapkit bench" in proc.stdout
