"""Every classic program in ``tests/legacy_scripts/`` migrates with nothing
left, and the migrated file, run on plain JAX 0.10 without pmapkit and with
DeprecationWarnings as errors, prints what the original prints under
``pmapkit run --route-pmap``, byte for byte (one ``pmapkit migrate --check``
run, one process after another). Migrating migrated code changes nothing."""
import os
import subprocess
import sys

import pytest

from pmapkit.tools.migrate import migrate_source

from _migrate_helpers import LEGACY_SCRIPTS, SAMPLES, TIMEOUT_S, env, verdicts_known_same

SCRIPTS = sorted(f for f in os.listdir(LEGACY_SCRIPTS) if f.endswith(".py"))

def _check_in_halves(tmp_path):
    """``pmapkit migrate --check --strict`` over the scripts, in two processes
    side by side (half the scripts each: a check runs its programs one after
    the other, each in its own copy, so two checks share nothing); their
    outputs joined, each half's output folder."""
    halves = [SCRIPTS[0::2], SCRIPTS[1::2]]
    procs = []
    for i, half in enumerate(halves):
        out = tmp_path / f"half{i}"
        procs.append((half, out, subprocess.Popen(
            [sys.executable, "-m", "pmapkit", "migrate",
             *[os.path.join(LEGACY_SCRIPTS, f) for f in half],
             "-o", str(out), "--check", "--strict"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())))
    done = []
    for half, out, proc in procs:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        done.append((half, out, proc.returncode, stdout, stderr))
    return done


def test_every_legacy_script_migrates_and_check_passes(tmp_path):
    assert len(SCRIPTS) >= 13
    for half, out, returncode, stdout, stderr in _check_in_halves(tmp_path):
        found = verdicts_known_same(stdout, LEGACY_SCRIPTS)
        assert found == {os.path.join(LEGACY_SCRIPTS, f): "same" for f in half}, stdout
        assert returncode == (1 if "DIFFERENT" in stdout else 0), \
            stdout[-6000:] + stderr[-4000:]
        assert f"{len(half)} file(s):" in stdout and " 0 left" in stdout
        for name in half:
            text = (out / name).read_text()
            assert "import pmapkit" not in text and "from pmapkit" not in text, name
            imports = [line for line in text.splitlines()
                       if line.startswith(("import ", "from "))]
            assert not [line for line in imports if any(
                gone in line for gone in ("experimental.pjit", "host_callback", "maps",
                                          "jax_export", "jax.config", "optimizers import",
                                          "experimental import export"))], (name, imports)


@pytest.mark.parametrize("path", [os.path.join(LEGACY_SCRIPTS, f) for f in SCRIPTS]
                         + [os.path.join(SAMPLES, f) for f in sorted(os.listdir(SAMPLES))
                            if f.endswith(".py")])
def test_migrating_migrated_code_changes_nothing(path):
    with open(path) as f:
        once, first = migrate_source(f.read(), path)
    twice, second = migrate_source(once, path)
    assert twice == once
    assert second.rewrites == [] and second.helpers == []
    assert [k.why for k in second.kept] == [k.why for k in first.kept]
