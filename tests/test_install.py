"""The suite tests what users get: the installed build, from any directory."""
import os
import re
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
    assert proc.stdout.startswith("usage: pmapkit ")
    assert "\n  demo " in proc.stdout and "'pmapkit bench --help'" in proc.stdout


def test_console_script_rejects_unknown_command(tmp_path):
    proc = _run_elsewhere([_console_script(), "frobnicate"], tmp_path)
    assert proc.returncode == 2
    assert "unknown command 'frobnicate'" in proc.stderr


def test_demo_runs_from_another_directory(tmp_path):
    proc = _run_elsewhere([_console_script(), "demo"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "pmapkit.pmap and jax.pmap agree" in proc.stdout
    # Then the speed at a glance: one step's cost three ways, in 100 columns.
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    costs = lines[lines.index("") + 1:]
    assert costs[0].startswith("per training step, caller-thread CPU µs"), costs
    impls, said = costs[1:4], costs[4:]
    assert [line.split()[0] for line in impls] == [
        "pmapkit.pmap", "jax.pmap", "jax.jit(shard_map)"], costs
    for line in impls:     # min – median – max µs
        low, _, mid, _, high, unit = line.split()[1:7]
        assert 0 < float(low) <= float(mid) <= float(high) and unit == "µs", line
    assert all(re.search(r"pmapkit\.pmap is \d+\.\d\dx (faster|slower)$", line)
               for line in impls[1:]), costs
    assert said[0].startswith("Compare the ratios"), costs


def test_python_dash_m_from_another_directory(tmp_path):
    proc = _run_elsewhere([sys.executable, "-m", "pmapkit", "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {os.path.basename(sys.executable)} -m pmapkit ")
    assert "\n  bench " in proc.stdout


def _distribution():
    from importlib import metadata
    try:
        return metadata.distribution("pmapkit")
    except metadata.PackageNotFoundError:
        pytest.skip("pmapkit is not installed as a distribution")


def test_the_install_carries_the_licence_and_says_which():
    """The wheel (and an editable install's metadata) ships LICENSE, the
    Apache-2.0 text the metadata declares."""
    dist = _distribution()
    licences = [f for f in dist.files or () if f.name == "LICENSE"]
    assert licences, sorted(str(f) for f in dist.files or ())[:50]
    text = licences[0].read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    meta = dist.metadata
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls), urls
    assert all(u.startswith("https://") for u in urls.values()), urls
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers, classifiers


def test_the_readme_links_work_on_a_package_index_page():
    """README.md is the index page's text: relative links would be dead
    there, so every link is absolute, and one into the repository names a
    file the checkout has."""
    readme = os.path.join(_install.REPO, "README.md")
    if not os.path.isfile(readme):
        pytest.skip("no README.md beside the tests; set PMAPKIT_CHECKOUT")
    with open(readme) as f:
        links = re.findall(r"\]\(([^)\s]+)\)", f.read())
    assert links
    home = "https://github.com/pmapkit/pmapkit/blob/main/"
    for link in links:
        assert link.startswith("https://"), link
        if link.startswith(home):
            path = link[len(home):].partition("#")[0]
            assert os.path.exists(os.path.join(_install.REPO, path)), link
