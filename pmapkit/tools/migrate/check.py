"""``pmapkit migrate --check``: run the original under ``pmapkit run
--route-pmap`` and the migrated file under plain Python with pmapkit not
importable and DeprecationWarnings as errors; compare exit status and stdout
(numbers within a tolerance). Only two successful runs that agree are SAME;
an original that fails proves nothing (UNPROVEN)."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import re
import subprocess
import sys

TIMEOUT_S = 600
RTOL, ATOL = 1e-5, 1e-6

# Runs the migrated script as ``python script.py`` would, but any import of
# pmapkit fails: the migrated program must stand on plain JAX.
GUARD = r"""
import os, runpy, sys
class _NoPmapkit:
    def find_spec(self, name, path=None, target=None):
        if name == "pmapkit" or name.startswith("pmapkit."):
            raise ModuleNotFoundError(
                f"pmapkit migrate --check: the migrated program imports {name}", name=name)
        return None
sys.meta_path.insert(0, _NoPmapkit())
script, beside = sys.argv[1], sys.argv[2]
sys.argv = [script] + sys.argv[3:]
# The migrated file's folder first, then the original's (modules beside it).
sys.path[:0] = [os.path.dirname(os.path.abspath(script)), beside]
runpy.run_path(script, run_name="__main__")
"""

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?\b(?:nan|inf)\b")


def original_command(script, args):
    return [sys.executable, "-m", "pmapkit", "run", "--route-pmap", script, *args]


def migrated_command(script, original, args):
    return [sys.executable, "-P", "-W", "error::DeprecationWarning", "-c", GUARD, script,
            os.path.dirname(os.path.abspath(original)), *args]


#: Verdicts: both runs succeeded and agree (the only proof); they differ; the
#: original itself failed, so nothing was proved.
SAME, DIFFERENT, UNPROVEN = "same", "DIFFERENT", "UNPROVEN"

# The line ``pmapkit run`` prints on stderr at start: never a program's error.
# (``pmapkit.legacy._installer.STARTUP_PREFIX``, not imported: it loads jax).
_STARTUP = re.compile(r"^pmapkit\.legacy: ")


@dataclasses.dataclass(frozen=True)
class Verdict:
    original: str
    migrated: str
    outcome: str      # SAME, DIFFERENT or UNPROVEN
    detail: str

    @property
    def same(self):
        return self.outcome == SAME

    def format(self):
        return f"check {self.original}: {self.outcome}: {self.detail}"


def program_stderr(stderr):
    """The lines of ``stderr`` the program wrote (pmapkit's start-up line dropped)."""
    return [line for line in stderr.strip().splitlines() if not _STARTUP.match(line)]


def last_error_line(stderr):
    """The program's own last words on stderr (for a traceback, its exception line)."""
    lines = [line for line in program_stderr(stderr) if line.strip()]
    return lines[-1].strip() if lines else "<nothing on stderr>"


def _numbers_close(a, b):
    x, y = float(a), float(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y or abs(x - y) <= ATOL + RTOL * max(abs(x), abs(y))


def same_line(a, b):
    """Equal text, and numbers equal within the tolerance."""
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    return all(_numbers_close(x, y) for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b)))


def compare(original, migrated, ran_original, ran_migrated):
    """A Verdict from two ``subprocess.CompletedProcess`` es: SAME only when both
    exit with status 0 and print the same; UNPROVEN when the original fails."""
    if ran_original.returncode:
        also = ("the migrated run failed too: " + last_error_line(ran_migrated.stderr)
                if ran_migrated.returncode else "the migrated run exited with status 0")
        return Verdict(original, migrated, UNPROVEN,
                       f"the original failed (exit status {ran_original.returncode}): "
                       f"{last_error_line(ran_original.stderr)}; {also}; nothing is "
                       "proved: make the original run (arguments after --)")
    if ran_migrated.returncode:
        tail = "\n    ".join(program_stderr(ran_migrated.stderr)[-6:])
        return Verdict(original, migrated, DIFFERENT,
                       f"exit status 0 (original) vs {ran_migrated.returncode} "
                       f"(migrated)\n    {tail}")
    a, b = ran_original.stdout.splitlines(), ran_migrated.stdout.splitlines()
    for k in range(max(len(a), len(b))):
        left = a[k] if k < len(a) else "<no line>"
        right = b[k] if k < len(b) else "<no line>"
        if not same_line(left, right):
            return Verdict(original, migrated, DIFFERENT,
                           f"stdout line {k + 1} differs\n    original: {left}\n"
                           f"    migrated: {right}")
    return Verdict(original, migrated, SAME, f"exit status 0, {len(a)} stdout lines agree")


def _run(command, cwd):
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(command, -9, exc.stdout or "",
                                           f"timed out after {TIMEOUT_S} s")


def check_all(pairs, args=(), jobs=None):
    """Verdicts for ``pairs`` of (original path, migrated path), run with
    ``args``, every process in parallel up to ``jobs`` (CPU count) at a time,
    each in its original's folder."""
    jobs = jobs or max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        runs = [(original, migrated,
                 pool.submit(_run, original_command(os.path.abspath(original), args),
                             os.path.dirname(os.path.abspath(original))),
                 pool.submit(_run, migrated_command(os.path.abspath(migrated), original, args),
                             os.path.dirname(os.path.abspath(original))))
                for original, migrated in pairs]
        return [compare(o, m, a.result(), b.result()) for o, m, a, b in runs]
