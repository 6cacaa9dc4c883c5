"""Every classic program in ``tests/legacy_scripts/`` migrates with nothing
left, and the migrated file, run on plain JAX 0.10 without pmapkit and with
DeprecationWarnings as errors, prints what the original prints under
``pmapkit run --route-pmap``, byte for byte (one ``pmapkit migrate --check``
run, one process after another). Migrating migrated code changes nothing."""
import os

import pytest

from pmapkit.tools.migrate import migrate_source

from _migrate_helpers import LEGACY_SCRIPTS, SAMPLES, migrate, verdicts_known_same

SCRIPTS = sorted(f for f in os.listdir(LEGACY_SCRIPTS) if f.endswith(".py"))

def test_every_legacy_script_migrates_and_check_passes(tmp_path):
    proc = migrate(LEGACY_SCRIPTS, "-o", str(tmp_path), "--check", "--strict")
    assert len(SCRIPTS) >= 13
    found = verdicts_known_same(proc.stdout, LEGACY_SCRIPTS)
    assert found == {os.path.join(LEGACY_SCRIPTS, f): "same" for f in SCRIPTS}, proc.stdout
    assert proc.returncode == (1 if "DIFFERENT" in proc.stdout else 0), \
        proc.stdout[-6000:] + proc.stderr[-4000:]
    assert f"{len(SCRIPTS)} file(s):" in proc.stdout and " 0 left" in proc.stdout
    for name in SCRIPTS:
        text = (tmp_path / name).read_text()
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
