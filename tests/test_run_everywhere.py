"""Wherever classic code runs under ``pmapkit run``: the whole process tree
(spawn and forkserver workers, a child and a grandchild ``python``, pytest
started by the program), every loader (pytest's assertion rewriter), every
way python takes a program (a pipe, ``-c``, stdin, ``/dev/null``, a
notebook, a command on PATH) and IPython's ``%load_ext pmapkit``. Real
subprocesses on 8 host devices, each bounded by a timeout."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

RUN = [sys.executable, "-m", "pmapkit", "run"]
TIMEOUT_S = 240
LEGACY_LINE = "pmapkit.legacy: "


def _env(**extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8", **extra)
    for name in ("PYTHONPATH", "PMAPKIT_RUN", "PMAPKIT_REPORT"):
        env.pop(name, None)
    # The console scripts of this interpreter (pytest, pmapkit) come first,
    # as in the venv the README activates.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def _run(args, cwd, input=None, **extra):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, input=input,
                          timeout=TIMEOUT_S, env=_env(**extra))


def _write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    return proc.stdout.splitlines()


def _classic_draws():
    """What jax.random.normal(PRNGKey(0), (3,)) gives in a plain process with
    the classic PRNG (jax_threefry_partitionable off, as before JAX 0.5) and
    with today's."""
    code = textwrap.dedent("""
        import jax
        key = jax.random.PRNGKey(0)
        for on in (False, True):
            with jax.threefry_partitionable(on):
                print([float(v) for v in jax.random.normal(key, (3,))])
    """)
    classic, modern = (eval(line) for line in _ok(_run([sys.executable, "-c", code], ".")))
    assert classic != modern
    return classic, modern


# --- the process tree --------------------------------------------------------

WORKERS = """
    import multiprocessing as mp
    import sys
    from concurrent.futures import ProcessPoolExecutor

    import jax
    import jax.numpy as jnp


    def work(i):
        # classic names in a worker: tree_multimap (removed in 0.3.16) and
        # jax.experimental.maps; and the classic PRNG
        from jax.experimental import maps
        total = jax.tree_multimap(lambda a, b: a + b, jnp.float32(i), jnp.float32(10))
        draws = jax.random.normal(jax.random.PRNGKey(0), (3,))
        return float(total), [float(v) for v in draws], maps.Mesh.__name__


    if __name__ == "__main__":
        with mp.get_context("spawn").Pool(2) as pool:
            print("spawn", pool.map(work, range(3)))
        with ProcessPoolExecutor(2, mp_context=mp.get_context("forkserver")) as ex:
            print("forkserver", list(ex.map(work, range(3))))
        with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
            print("executor", list(ex.map(work, range(3))))
"""


def test_spawn_forkserver_and_executor_workers_have_the_classic_layer(tmp_path):
    script = _write(tmp_path, "workers.py", WORKERS)
    classic, _ = _classic_draws()
    lines = _ok(_run(RUN + [script], tmp_path))
    expected = [(10.0 + i, classic, "Mesh") for i in range(3)]
    assert lines == [f"{kind} {expected!r}" for kind in ("spawn", "forkserver", "executor")]


def test_the_options_travel_to_workers(tmp_path):
    script = _write(tmp_path, "options.py", """
        import multiprocessing as mp

        def probe(_):
            import jax
            import pmapkit
            draws = jax.random.normal(jax.random.PRNGKey(0), (3,))
            return (getattr(jax.pmap, "__wrapped__", None) is pmapkit.pmap
                    or jax.pmap is pmapkit.pmap, [float(v) for v in draws])

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(1) as pool:
                print(pool.map(probe, [0])[0])
    """)
    classic, modern = _classic_draws()
    assert _ok(_run(RUN + ["--route-pmap", script], tmp_path)) == [repr((True, classic))]
    assert _ok(_run(RUN + ["--modern-prng", script], tmp_path)) == [repr((False, modern))]


def test_a_child_and_a_grandchild_python_have_it_and_a_process_outside_has_nothing(tmp_path):
    grandchild = "import jax; print('grandchild', jax.tree_multimap(lambda a: a * 3, 3))"
    child = textwrap.dedent(f"""
        import subprocess, sys
        import jax
        print('child', jax.tree_multimap(lambda a: a * 2, 3), flush=True)
        subprocess.run([sys.executable, '-c', {grandchild!r}], check=True)
    """)
    script = _write(tmp_path, "tree.py", f"""
        import subprocess, sys
        subprocess.run([sys.executable, '-c', {child!r}], check=True)
        # no jax imported here, nor in this child: none is imported for it
        subprocess.run([sys.executable, '-c',
                        'import sys; print("no jax", "jax" not in sys.modules)'], check=True)
    """)
    proc = _run(RUN + [script], tmp_path)
    assert _ok(proc) == ["child 6", "grandchild 9", "no jax True"]
    # Only the top process announces the layer (here: it never imported jax).
    assert [l for l in proc.stderr.splitlines() if l.startswith(LEGACY_LINE)] == []
    outside = _run([sys.executable, "-c", "import jax; print(hasattr(jax, 'tree_multimap'))"],
                   tmp_path)
    assert _ok(outside) == ["False"]


def test_the_report_counts_the_workers_uses(tmp_path):
    script = _write(tmp_path, "report.py", """
        import multiprocessing as mp

        def work(i):
            import jax
            return jax.tree_multimap(lambda a: a + 1, i)

        def stacked(i):
            import jax
            return jax.ops.index_update(jax.numpy.zeros(2), 0, i).tolist()

        if __name__ == "__main__":
            pool = mp.get_context("spawn").Pool(2)
            print(pool.map(work, range(4)))
            pool.close()
            pool.join()           # the workers exit normally
            with mp.get_context("spawn").Pool(2) as pool:
                print(pool.map(stacked, [1]))   # terminated at the with's end
    """)
    proc = _run(RUN + ["--report=json", script], tmp_path)
    assert _ok(proc) == ["[1, 2, 3, 4]", "[[1.0, 0.0]]"]
    reports = [l for l in proc.stderr.splitlines() if l.startswith('{"pmapkit_legacy_report"')]
    assert len(reports) == 1, proc.stderr
    uses = {e["name"]: e["uses"] for e in json.loads(reports[0])["names"]}
    # Every use of workers that exit; every name of workers that are killed.
    assert uses == {"jax.tree_multimap": 4, "jax.ops.index_update": 1}
    first = {e["name"]: e["first_use"] for e in json.loads(reports[0])["names"]}
    assert first["jax.tree_multimap"] == f"{script}:6"
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".json")]


# --- pytest and its assertion rewriter -----------------------------------------

PYTEST_MODULE = """
    import jax
    import jax.test_util as jtu
    from jax.test_util import check_close, check_eq
    from jax.experimental.maps import Mesh

    import numpy as np


    def test_served_names_in_a_rewritten_module():
        assert jtu.JaxTestCase.__module__ == "jax.test_util"
        assert len(jtu.cases_from_list(range(3))) <= 3
        check_eq(np.float32(1.0), np.float32(1.0))
        check_close(np.float32(1.0), np.float32(1.0 + 1e-7))
        assert jax.tree_multimap(lambda a, b: a + b, 1, 2) == 3
        assert Mesh.__name__ == "Mesh"


    class ClassicCase(jtu.JaxTestCase):
        def test_classic_base(self):
            self.assertAllClose(np.ones(2), np.ones(2))
            # operands numpy makes an object array of, as classic compared them
            self.assertArraysEqual((jax.numpy.array(0.), {"k": jax.numpy.array(2.)}),
                                   (0.0, {"k": 2.0}))
            with self.assertRaises(AssertionError):
                self.assertArraysEqual((0.0, {"k": 2.0}), (0.0, {"k": 3.0}))
"""


@pytest.mark.parametrize("how", ["-m pytest", "pytest (console script)", "python -m pytest child"])
def test_served_names_in_a_module_pytest_collects(tmp_path, how):
    pytest.importorskip("absl")      # jax.test_util's base needs it, as classic did
    _write(tmp_path, "test_classic_names.py", PYTEST_MODULE)
    args = ["-q", "-p", "no:cacheprovider", "test_classic_names.py"]
    if how == "-m pytest":
        proc = _run(RUN + ["-m", "pytest", *args], tmp_path)
    elif how == "pytest (console script)":
        assert shutil.which("pytest", path=_env()["PATH"])
        proc = _run(RUN + ["pytest", *args], tmp_path)
    else:
        driver = _write(tmp_path, "driver.py", f"""
            import subprocess, sys
            sys.exit(subprocess.call([sys.executable, "-m", "pytest", *{args!r}]))
        """)
        proc = _run(RUN + [driver], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout


# --- every way python takes a program -------------------------------------------

MAIN_FACTS = """
import sys
names = sorted(k for k in globals() if k.startswith("__"))
print(names, type(__loader__).__name__ if not isinstance(__loader__, type) else __loader__.__name__,
      __spec__, sys.argv, repr(sys.path[0]), globals().get("__file__"))
"""


def _facts(proc):
    return [line.replace(os.sep + "dev" + os.sep + "fd" + os.sep, "FD/")
            for line in _ok(proc)]


@pytest.mark.parametrize("form", ["file", "-c", "stdin", "pipe"])
def test_a_program_sees_what_python_gives_it(tmp_path, form):
    script = _write(tmp_path, "facts.py", MAIN_FACTS)
    if form == "file":
        plain = _run([sys.executable, "facts.py", "a"], tmp_path)
        ours = _run(RUN + ["facts.py", "a"], tmp_path)
    elif form == "-c":
        plain = _run([sys.executable, "-c", MAIN_FACTS, "a", "b"], tmp_path)
        ours = _run(RUN + ["-c", MAIN_FACTS, "a", "b"], tmp_path)
    elif form == "stdin":
        plain = _run([sys.executable, "-", "a"], tmp_path, input=MAIN_FACTS)
        ours = _run(RUN + ["-", "a"], tmp_path, input=MAIN_FACTS)
    else:   # a pipe given as a path, as bash's <(...) gives it
        command = " ".join([*(f"'{a}'" for a in RUN), '<(cat facts.py)', "x"])
        plain = subprocess.run(["bash", "-c", f"'{sys.executable}' <(cat facts.py) x"],
                               cwd=tmp_path, capture_output=True, text=True,
                               timeout=TIMEOUT_S, env=_env())
        ours = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True,
                              text=True, timeout=TIMEOUT_S, env=_env())
    import re
    fd = re.compile(r"FD/\d+")
    assert [fd.sub("FD/N", l) for l in _facts(ours)] == \
        [fd.sub("FD/N", l) for l in _facts(plain)]
    assert script


def test_exit_codes_and_devices_as_python_gives_them(tmp_path):
    assert _run(RUN + ["/dev/null"], tmp_path).returncode == 0
    assert _run(RUN + ["-c", "import sys; sys.exit(3)"], tmp_path).returncode == 3
    failed = _run(RUN + ["-c", "print('before'); 1/0"], tmp_path)
    assert failed.returncode == 1 and failed.stdout == "before\n"
    assert failed.stderr.splitlines()[-3:] == [
        "Traceback (most recent call last):",
        '  File "<string>", line 1, in <module>',
        "ZeroDivisionError: division by zero"]
    missing = _run(RUN + ["-c"], tmp_path)
    assert missing.returncode == 2 and "-c needs the code to run" in missing.stderr


def test_classic_names_in_a_c_program_and_a_piped_one(tmp_path):
    code = "import jax; print(jax.tree_multimap(lambda a: a + 1, 41))"
    assert _ok(_run(RUN + ["-c", code], tmp_path)) == ["42"]
    assert _ok(_run(RUN + ["-"], tmp_path, input=code)) == ["42"]


def test_a_command_on_path_that_is_not_python_passes_the_layer_on(tmp_path):
    (tmp_path / "bin").mkdir()
    shell = _write(tmp_path, "bin/job", f"""\
        #!/bin/sh
        exec '{sys.executable}' -c 'import jax; print(jax.tree_multimap(lambda a: a, 7))'
    """)
    os.chmod(shell, 0o755)
    env_path = f"{tmp_path / 'bin'}{os.pathsep}{_env()['PATH']}"
    proc = _run(RUN + ["job"], tmp_path, PATH=env_path)
    assert _ok(proc) == ["7"]
    status = _run(RUN + ["false"], tmp_path)
    assert status.returncode == 1


# --- notebooks and IPython -------------------------------------------------------

def _notebook(tmp_path, cells, name="classic.ipynb"):
    nb = {"cells": [{"cell_type": kind, "metadata": {}, "source": source,
                     **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                    for kind, source in cells],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
          "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / name
    path.write_text(json.dumps(nb, indent=1))
    return str(path)


def test_a_notebook_runs_its_code_cells_in_order(tmp_path):
    path = _notebook(tmp_path, [
        ("code", ["import sys\n", "import jax\n",
                  "total = jax.tree_multimap(lambda a, b: a + b, 1, 2)\n"]),
        ("markdown", ["# not code: print('markdown ran')\n"]),
        ("code", "print('total', total, sys.argv[1:], __name__, __file__.endswith('.ipynb'))"),
    ])
    proc = _run(RUN + [path, "arg"], tmp_path)
    assert _ok(proc) == ["total 3 ['arg'] __main__ True"]


def test_a_notebook_cell_that_raises_shows_its_line_and_fails(tmp_path):
    path = _notebook(tmp_path, [("code", "x = 1"), ("code", "y = x\nraise ValueError('cell two')")])
    proc = _run(RUN + [path], tmp_path)
    assert proc.returncode == 1
    assert "code cell 2" in proc.stderr and "raise ValueError('cell two')" in proc.stderr
    assert proc.stderr.rstrip().endswith("ValueError: cell two")


def test_a_notebook_with_magics_runs_through_ipython(tmp_path):
    pytest.importorskip("IPython")
    path = _notebook(tmp_path, [
        ("code", "%config InteractiveShell.ast_node_interactivity = 'none'\nimport jax"),
        ("code", "out = jax.tree_multimap(lambda a: a * 2, 21)\nprint('out', out)"),
    ])
    assert _ok(_run(RUN + [path], tmp_path)) == ["out 42"]


def test_a_notebook_calling_get_ipython_runs_through_ipython(tmp_path):
    pytest.importorskip("IPython")
    path = _notebook(tmp_path, [("code", "import jax"),
                                ("code", "print(type(get_ipython()).__name__)")])
    assert _ok(_run(RUN + [path], tmp_path)) == ["TerminalInteractiveShell"]


def test_needs_ipython_reads_ipython_syntax_only():
    from pmapkit.tools.notebook import needs_ipython
    assert needs_ipython("x = 1\n%matplotlib inline") == "%matplotlib inline"
    assert needs_ipython("files = !ls") == "files = !ls"
    assert needs_ipython("jax.pmap?") == "jax.pmap?"
    assert needs_ipython("ip = get_ipython()") == "ip = get_ipython()"
    assert needs_ipython("x = a % b\ny = not_get_ipython_here\nprint('!')") is None


def test_a_file_that_is_not_a_notebook_is_refused_before_running(tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_text("{not json")
    proc = _run(RUN + [str(path)], tmp_path)
    assert proc.returncode == 1
    assert "not a Jupyter notebook" in proc.stderr and "Traceback" not in proc.stderr


def test_load_ext_pmapkit_in_an_ipython_shell(tmp_path):
    pytest.importorskip("IPython")
    session = "\n".join([
        "import jax",
        "%load_ext pmapkit",
        "print('served', jax.tree_multimap(lambda a: a + 1, 1))",
        "%pmapkit --route-pmap",
        "import pmapkit",
        "print('routed', jax.pmap is pmapkit.pmap or jax.pmap.__wrapped__ is pmapkit.pmap)",
        "%pmapkit --bogus",
    ])
    proc = _run([sys.executable, "-m", "IPython", "--quick", "--no-banner",
                 "--simple-prompt", "--colors=NoColor", "-c", session], tmp_path)
    lines = _ok(proc)
    assert "served 2" in lines and "routed True" in lines
    assert any("unknown option '--bogus'" in line for line in lines)
