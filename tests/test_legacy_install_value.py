"""What ``pmapkit.legacy.install()`` returns: the names it installed, a tuple
its callers count, iterate, compare and add to, echoed at the interactive
prompt in one short line (the whole tuple's repr was 8,722 characters)."""
import os
import subprocess
import sys

from pmapkit.legacy.installed_names import InstalledNames

TIMEOUT_S = 300


def test_install_at_the_prompt_echoes_one_short_line(tmp_path):
    session = ("import pmapkit.legacy\n"
               "got = pmapkit.legacy.install()\n"
               "got\n"
               "print(len(got), len(list(got)), len(repr(tuple(got))))\n"
               "pmapkit.legacy.install()\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-P", "-q", "-i"], input=session, cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, counts, second = proc.stdout.strip().splitlines()
    n, listed, whole = map(int, counts.split())
    assert n == listed > 100 and whole > 2000       # many names, a long tuple
    assert len(first) < 200 and f"{n:,} names" in first, first
    assert second == "InstalledNames(): nothing new installed"


def test_the_value_behaves_as_the_tuple_callers_use():
    names = InstalledNames(["jax.a", "jax.b", "jax.c"])
    assert isinstance(names, tuple) and names == ("jax.a", "jax.b", "jax.c")
    assert names + ("jax.pmap",) == ("jax.a", "jax.b", "jax.c", "jax.pmap")
    assert list(names) == ["jax.a", "jax.b", "jax.c"] and "jax.b" in names
    assert len(names) == 3 and names[1:] == ("jax.b", "jax.c")
    assert repr(names) == "InstalledNames(3 names: jax.a, jax.b, ... 1 more; list(...) shows all)"
    assert InstalledNames() == () and not InstalledNames()
