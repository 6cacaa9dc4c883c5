"""``pmapkit run --report`` / ``PMAPKIT_REPORT=1``: which classic names a
program used, printed on stderr at exit as a migration map.

Counting happens only when the report is on: ``pmapkit.legacy`` then installs
counting stand-ins (a function that counts its calls, a class that counts its
``isinstance`` checks and instantiations, a module counted when imported) instead of the plain
values, so with the report off nothing is wrapped and nothing counts. pmapkit's
own pmap/pjit count their construction, never the calls of what they return:
the hit path is the same either way.
"""
from __future__ import annotations

import atexit
import functools
import os
import sys
import threading

from pmapkit.legacy import names as legacy_names

__all__ = ["enable", "enabled", "note", "counted", "counting_module_getattr",
           "counts", "table", "env_requests_report"]

_lock = threading.Lock()
_counts: dict[str, int] = {}
_how: dict[str, str] = {}
_enabled = False


def env_requests_report():
    return os.environ.get("PMAPKIT_REPORT", "").strip().lower() not in ("", "0", "false", "no")


def enable():
    """Turns counting on and prints the table at interpreter exit (once)."""
    global _enabled
    if not _enabled:
        _enabled = True
        atexit.register(_print_at_exit)


def enabled():
    return _enabled


def note(name, how="calls"):
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        _how.setdefault(name, how)


def counts():
    """``{classic name: uses}`` so far."""
    with _lock:
        return dict(_counts)


def counted(name, value, how="calls"):
    """``value`` as installed under ``name`` while the report is on: a
    function counts its calls, a class its isinstance checks and instantiations."""
    if isinstance(value, type):
        return _CountingAlias(name.rpartition(".")[2], (),
                              {"__module__": name.rpartition(".")[0],
                               "_pmapkit_name": name, "_pmapkit_target": value,
                               "__doc__": f"{name}: an alias of {value.__module__}."
                                          f"{value.__qualname__} (counted)."})
    if callable(value):
        @functools.wraps(value)
        def counting(*args, **kwargs):
            note(name, how)
            return value(*args, **kwargs)
        return counting
    return value


class _CountingAlias(type):
    """The metaclass of a counted type alias: ``isinstance(x, Alias)`` is
    ``isinstance(x, target)`` and ``Alias(...)`` is ``target(...)``, counted."""

    def __instancecheck__(cls, obj):
        note(cls._pmapkit_name, "uses")
        return isinstance(obj, cls._pmapkit_target)

    def __subclasscheck__(cls, sub):
        note(cls._pmapkit_name, "uses")
        return issubclass(sub, cls._pmapkit_target)

    def __call__(cls, *args, **kwargs):
        note(cls._pmapkit_name, "uses")
        return cls._pmapkit_target(*args, **kwargs)


def counting_module_getattr(module_name, values):
    """A module ``__getattr__`` serving ``values`` (kept out of the module's
    dict so every read is counted, as a use of ``module_name``)."""
    def __getattr__(attr):
        if attr in values:
            note(module_name, "reads")
            return values[attr]
        raise AttributeError(f"module {module_name!r} has no attribute {attr!r}")
    return __getattr__


def _served_by(record):
    return record.served_by or "refused: a clear error"


def table():
    """The migration map of the names counted so far, one line each."""
    used = {name: n for name, n in counts().items() if legacy_names.known(name)}
    if not used:
        return ("pmapkit.legacy report: this program used none of the classic "
                "names pmapkit stands in for.")
    rows = [("classic name", "uses", "served by", "modern JAX", "example")]
    for name in sorted(used):
        record = legacy_names.by_name(name)
        rows.append((f"{name} (removed in {record.removed_in})",
                     f"{used[name]} {_how.get(name, 'calls')}",
                     _served_by(record), record.modern, record.example))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"pmapkit.legacy report: {len(rows) - 1} classic name(s) used"]
    for k, row in enumerate(rows):
        lines.append("  " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths))
                     + " | " + row[4])
        if k == 0:
            lines.append("  " + "-+-".join("-" * w for w in widths) + "-+-" + "-" * 7)
    return "\n".join(lines)


def _print_at_exit():
    try:
        sys.stdout.flush()
    except Exception:   # a closed stdout must not hide the report
        pass
    print(table(), file=sys.stderr, flush=True)
