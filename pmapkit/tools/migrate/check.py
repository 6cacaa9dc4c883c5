"""``pmapkit migrate --check``'s comparison: the verdict on two finished runs.

The exit statuses and standard outputs are compared as bytes, line by line.
Without a tolerance every byte must match. With ``--rtol``/``--atol`` a
float written the same way on both sides (``0.25``, ``2.5e-01``, ``1.``: a
point or an exponent) may differ within ``atol + rtol * |original|``; the
text around the numbers still matches byte for byte, and integers, ``inf``
and ``nan`` are text: never compared with a tolerance. Lines matching an
``--ignore`` pattern are dropped from both outputs first (timings), and the
verdict says how many. Standard error is not compared: ``pmapkit run``
writes a line there and warnings name each run's own files; a failed run's
last stderr lines are quoted. Only two successful runs that agree are SAME;
an original that fails proves nothing (UNPROVEN). ``check_runs`` runs them.
"""
from __future__ import annotations

import dataclasses
import math
import re

#: Seconds each run may take (``--timeout``) before it is killed.
TIMEOUT_S = 600
#: MiB of files the program's folder may hold to be copied for a run (``--copy-limit``).
COPY_LIMIT_MIB = 256

#: Verdicts: both runs succeeded and agree (the only proof); they differ; the
#: original itself failed, so nothing was proved.
SAME, DIFFERENT, UNPROVEN = "same", "DIFFERENT", "UNPROVEN"

# A float as Python and NumPy print one: digits with a point or an exponent,
# not glued to a word or to another number (``v1.2.3``, ``x86``, ``f1.5`` are
# text). Integers, inf and nan are never matched: they compare as text.
_FLOAT = re.compile(rb"(?<![\w.])[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?"
                    rb"|\d+[eE][-+]?\d+)(?![\d.])")

# The line ``pmapkit run`` prints on stderr at start: never a program's error.
# (``pmapkit.legacy._installer.STARTUP_PREFIX``, not imported: it loads jax).
_STARTUP = re.compile(r"^pmapkit\.legacy: ")

#: Differing line pairs a DIFFERENT verdict shows.
SHOWN = 3


@dataclasses.dataclass(frozen=True)
class Options:
    """How ``--check`` runs and compares (the command line's flags)."""
    rtol: float = 0.0
    atol: float = 0.0
    ignore: tuple = ()            # compiled ``re`` patterns (str), searched in each line
    timeout: float = TIMEOUT_S    # seconds per run
    stdin: str | None = None      # a file both runs read as stdin; else /dev/null
    copy_limit_mib: float = COPY_LIMIT_MIB

    @property
    def tolerant(self):
        return self.rtol > 0 or self.atol > 0

    def terms(self):
        """How lines were compared, for the verdict."""
        if not self.tolerant:
            return "byte for byte"
        return (f"with floats within --rtol {self.rtol:g} --atol {self.atol:g} "
                "(integers, inf and nan exactly)")


@dataclasses.dataclass(frozen=True)
class Run:
    """One finished run (``returncode`` negative: killed by that signal)."""
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


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


def _text(data):
    """``data`` (bytes) as text to show: undecodable bytes as ``\\xNN``."""
    return data.decode("utf-8", "backslashreplace") if isinstance(data, bytes) else data


def program_stderr(stderr):
    """The lines of ``stderr`` the program wrote (pmapkit's start-up line dropped)."""
    return [line for line in _text(stderr).strip().splitlines() if not _STARTUP.match(line)]


def last_error_line(stderr):
    """The program's own last words on stderr (for a traceback, its exception line)."""
    lines = [line for line in program_stderr(stderr) if line.strip()]
    return lines[-1].strip() if lines else "<nothing on stderr>"


def _close(a, b, options):
    if a == b:
        return True
    x, y = float(a), float(b)
    if math.isinf(x) or math.isinf(y):      # a literal past the float range: text
        return False
    return abs(x - y) <= options.atol + options.rtol * abs(x)


def same_line(a, b, options=Options()):
    """Whether the output lines ``a`` and ``b`` (bytes) agree: the same bytes,
    or, with a tolerance, the same bytes around floats that are close."""
    if a == b:
        return True
    if not options.tolerant:
        return False
    if _FLOAT.sub(b"#", a) != _FLOAT.sub(b"#", b):
        return False
    return all(_close(x, y, options) for x, y in zip(_FLOAT.findall(a), _FLOAT.findall(b)))


def kept_lines(output, options):
    """([(line number, line)], how many lines ``--ignore`` dropped) of
    ``output`` (bytes; each line keeps its line ending)."""
    kept, skipped = [], 0
    for number, line in enumerate(output.splitlines(keepends=True), 1):
        text = line.decode("utf-8", "surrogateescape")
        if any(pattern.search(text) for pattern in options.ignore):
            skipped += 1
        else:
            kept.append((number, line))
    return kept, skipped


#: Characters of a differing line shown; a longer line is cut to a window
#: around its first difference from the other side's line.
WIDTH = 200
#: Characters the window shows before the first difference.
BEFORE = 60


def _visible(text):
    """``text`` with each control or invisible character written as its
    escape (``\\x1b``, ``\\r``, ``\\u200b``), so that two lines that differ
    there do not look the same."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def _first_difference(a, b):
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return min(len(a), len(b))


def _shown(line, other=None):
    if line is None:
        return "<no line>"
    text = _text(line.rstrip(b"\r\n"))
    end = "" if line.endswith(b"\n") else "  <no newline at the end>"
    if len(text) <= WIDTH:
        return _visible(text) + end
    at = _first_difference(text, _text(other.rstrip(b"\r\n")) if other is not None else "")
    start = max(0, min(at - BEFORE, len(text) - WIDTH))
    stop = start + WIDTH
    return (("..." if start else "") + _visible(text[start:stop])
            + ("..." if stop < len(text) else "")
            + f"  <characters {start + 1}-{min(stop, len(text))} of {len(text)}, "
              f"first difference at {at + 1}>" + end)


def _pair(side, number, line, other):
    shown = _shown(line, other)
    if line is not None and other is not None and shown == _shown(other, line):
        shown = repr(line[:WIDTH])      # the bytes differ where the eye sees none
    where = f"line {number}" if line is not None else "after the last line"
    return f"    {side} {where}: {shown}"


def _skipped_note(options, skipped_original, skipped_migrated):
    if not options.ignore:
        return ""
    patterns = ", ".join(repr(p.pattern) for p in options.ignore)
    return (f"; skipped by --ignore {patterns}: {skipped_original} original and "
            f"{skipped_migrated} migrated lines")


def compare_outputs(original, migrated, out_original, out_migrated, options=Options()):
    """The verdict on two successful runs' stdouts (bytes)."""
    a, skipped_a = kept_lines(out_original, options)
    b, skipped_b = kept_lines(out_migrated, options)
    note = _skipped_note(options, skipped_a, skipped_b)
    for k in range(max(len(a), len(b))):
        left = a[k] if k < len(a) else (None, None)
        right = b[k] if k < len(b) else (None, None)
        if left[1] is not None and right[1] is not None and same_line(left[1], right[1],
                                                                      options):
            continue
        shown = []
        for j in range(k, max(len(a), len(b))):
            left = a[j] if j < len(a) else (None, None)
            right = b[j] if j < len(b) else (None, None)
            if (left[1] is not None and right[1] is not None
                    and same_line(left[1], right[1], options)) or len(shown) == 2 * SHOWN:
                break
            shown += [_pair("original", left[0], left[1], right[1]),
                      _pair("migrated", right[0], right[1], left[1])]
        return Verdict(original, migrated, DIFFERENT,
                       f"stdout differs ({len(a)} original and {len(b)} migrated lines "
                       f"compared {options.terms()}{note})\n" + "\n".join(shown))
    return Verdict(original, migrated, SAME,
                   f"exit status 0, {len(a)} stdout lines agree {options.terms()}{note}")


def compare(original, migrated, ran_original, ran_migrated, options=Options()):
    """A Verdict from two ``Run`` s: SAME only when both exit with status 0
    and print the same; UNPROVEN when the original fails."""
    if ran_original.timed_out:
        return Verdict(original, migrated, UNPROVEN,
                       f"the original ran past the --timeout of {options.timeout:g} s and "
                       "was stopped; nothing is proved: raise --timeout, or give arguments "
                       "that make it shorter (after --)")
    if ran_original.returncode:
        also = ("the migrated run failed too: " + last_error_line(ran_migrated.stderr)
                if ran_migrated.returncode else "the migrated run exited with status 0")
        return Verdict(original, migrated, UNPROVEN,
                       f"the original failed (exit status {ran_original.returncode}): "
                       f"{last_error_line(ran_original.stderr)}; {also}; nothing is "
                       "proved: make the original run (arguments after --)")
    if ran_migrated.timed_out:
        return Verdict(original, migrated, DIFFERENT,
                       f"the migrated run ran past the --timeout of {options.timeout:g} s "
                       "(the original finished) and was stopped")
    if ran_migrated.returncode:
        tail = "\n    ".join(program_stderr(ran_migrated.stderr)[-6:])
        return Verdict(original, migrated, DIFFERENT,
                       f"exit status 0 (original) vs {ran_migrated.returncode} "
                       f"(migrated)\n    {tail}")
    return compare_outputs(original, migrated, ran_original.stdout, ran_migrated.stdout,
                           options)
