"""``docs/migrate.md``: its ```python blocks run, in order, in one fresh
process with 8 CPU devices (a block marked ```python notest is skipped)."""
import os
import re
import subprocess
import sys

from _migrate_helpers import HERE, env

DOC = os.path.join(os.path.dirname(HERE), "docs", "migrate.md")


def test_the_python_blocks_run():
    with open(DOC) as f:
        text = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert len(blocks) >= 4
    program = "\n\n".join(blocks)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300, env=env(), cwd=os.path.dirname(DOC))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "step.py: 5 rewritten, 0 left, 0 pmap kept" in proc.stdout
    assert "# pmapkit migrate: jax.experimental.maps.xmap left as written" in proc.stdout
