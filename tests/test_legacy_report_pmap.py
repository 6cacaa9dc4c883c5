"""``pmapkit run --report`` lists a program's ``jax.pmap`` uses with what ran
them, with ``--route-pmap`` (pmapkit.pmap) and without (JAX's own)."""
import json
import os
import subprocess
import sys

import pytest

TIMEOUT_S = 300
SCRIPT = """
import jax, numpy as np
f = jax.pmap(lambda x: x * 2)
g = jax.pmap(lambda x: x + 1)
print(float(f(np.ones((1, 2), np.float32)).sum()), float(g(np.ones((1, 2), np.float32)).sum()))
"""


def _report(tmp_path, *flags):
    script = tmp_path / "uses_pmap.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    env.pop("PMAPKIT_REPORT", None)
    proc = subprocess.run([sys.executable, "-P", "-m", "pmapkit", "run", *flags,
                           "--report=json", str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["4.0", "4.0"]
    line, = [x for x in proc.stderr.splitlines() if x.startswith('{"pmapkit_legacy_report"')]
    return {e["name"]: e for e in json.loads(line)["names"]}, script


@pytest.mark.parametrize("route", [False, True], ids=["jax_own", "routed"])
def test_the_report_lists_jax_pmap_with_what_ran_it(tmp_path, route):
    names, script = _report(tmp_path, *(["--route-pmap"] if route else []))
    entry = names["jax.pmap"]
    assert entry["uses"] == 2 and entry["first_use"] == f"{script}:3"
    if route:
        assert entry["served_by"] == "pmapkit.pmap (--route-pmap)"
    else:
        assert entry["served_by"].startswith("JAX's own jax.pmap")
