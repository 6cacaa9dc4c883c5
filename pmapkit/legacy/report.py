"""``pmapkit run --report`` / ``PMAPKIT_REPORT=1``: which classic names a
program used, printed on stderr at exit as a migration map: per name the
uses, the file:line of the first use in the program (outside pmapkit and
JAX), what served it and the modern replacement.

The report fits 100 columns (``WIDTH``): a few lines per name, long values
folded. Each name also says how many public repositories of 2019-2024 reach it (the
census of real use, ``census.real_use()``).
``--report=wide`` / ``PMAPKIT_REPORT=wide`` prints it as one table
line per name, however wide. ``--report=json`` / ``PMAPKIT_REPORT=json``
prints the same as one JSON object on stderr (one line starting
``{"pmapkit_legacy_report"``); ``--report=PATH.json`` /
``PMAPKIT_REPORT=PATH.json`` writes it to that file.

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
import json
import os
import sys
import textwrap
import threading

from pmapkit.legacy import run_options

# The census and the names table (which import jax) are read only when a
# report is written: a process of a ``pmapkit run`` tree that never imports
# jax writes its (empty) report without them.

__all__ = ["enable", "enabled", "note", "seen", "unseen", "counted", "counting_module_getattr",
           "counting_module", "counts", "entries", "table", "format_entries", "as_json",
           "env_requests_report", "join_tree", "print_tree_report"]

_lock = threading.Lock()
_counts: dict[str, int] = {}
_how: dict[str, str] = {}
_first: dict[str, str] = {}
_enabled = False
_form = "table"      # "table", "wide", "json" (stderr) or a path to write the JSON to
#: In a ``pmapkit run`` tree: ``(folder, top)``. A worker (``top`` False)
#: writes its counts into ``folder`` at exit; the top process prints nothing
#: of its own (``activation`` prints the tree's report, this process's counts
#: merged with the workers').
_tree = None
FORMS = run_options.REPORT_FORMS   # the named forms besides the default table and a path
#: The columns the default table fits.
WIDTH = 100
_OURS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
         os.path.dirname(os.path.dirname(os.path.abspath(json.__file__))) + os.sep)


def env_requests_report():
    """The report ``PMAPKIT_REPORT`` asks for: False, True (the table),
    "wide", "json" or a path ending in .json."""
    return run_options.report_form_from_environment()


def join_tree(folder, top):
    """This process belongs to a ``pmapkit run`` tree whose report is
    gathered in ``folder``: at exit a worker writes its counts there, and the
    top process leaves the printing to ``print_tree_report``."""
    global _tree
    _tree = (folder, bool(top))


def print_tree_report(folder, form):
    """The tree's report: this process's counts and those every worker wrote
    into ``folder``, printed (or written) in ``form``."""
    global _form
    for name in sorted(os.listdir(folder)):
        try:
            with open(os.path.join(folder, name)) as f:
                data = json.load(f)
        except (OSError, ValueError):   # a worker killed while writing
            continue
        _merge(data)
    if isinstance(form, str):
        _form = form
    _write_report()


def _merge(data):
    with _lock:
        for name, n in data.get("counts", {}).items():
            if not _counts.get(name):
                _how[name] = data.get("how", {}).get(name, "calls")
            _counts[name] = _counts.get(name, 0) + n
            first = data.get("first", {}).get(name)
            if first and name not in _first:
                _first[name] = first


def enable(form=True):
    """Turns counting on and writes the report at interpreter exit (once):
    ``form`` True for the table (within ``WIDTH`` columns), "wide" for one
    line per name, "json" for JSON on stderr, or a path ending in .json."""
    global _enabled, _form
    if isinstance(form, str):
        if form not in FORMS and not form.endswith(".json"):
            raise ValueError(f"report must be True, 'wide', 'json' or a path ending "
                             f"in .json; got {form!r}")
        _form = form
    if not _enabled:
        _enabled = True
        atexit.register(_print_at_exit)
        _count_jax_pmap()


def _count_jax_pmap():
    """``jax.pmap`` counted whatever runs it: JAX 0.10's own (``jax.jit`` of
    ``shard_map``), or pmapkit.pmap once ``--route-pmap`` installs it (then
    counted again as installed)."""
    import jax
    if not getattr(jax.pmap, "_pmapkit_counted", False):
        jax.pmap = counted("jax.pmap", jax.pmap)
        jax.pmap._pmapkit_counted = True


def _what_runs_jax_pmap():
    """What ``jax.pmap`` calls run now: pmapkit.pmap (routed) or JAX's own."""
    import jax
    target = getattr(jax.pmap, "__wrapped__", jax.pmap)
    if getattr(target, "__module__", "").startswith("pmapkit"):
        return "pmapkit.pmap (--route-pmap)"
    return ("JAX's own jax.pmap (jax.jit of shard_map in JAX 0.10); "
            "--route-pmap runs pmapkit.pmap")


def enabled():
    return _enabled


def _site():
    """file:line of the innermost frame outside pmapkit, JAX and the
    standard library: where the program used the name."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_OURS) or filename.startswith("<frozen")
                or os.sep + "jax" + os.sep in filename):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class unseen:
    """Inside it, reads are the installer's own looks (``hasattr``), not
    the program's uses: neither counted nor listed."""

    def __enter__(self):
        _quiet.depth = getattr(_quiet, "depth", 0) + 1

    def __exit__(self, *exc):
        _quiet.depth -= 1


_quiet = threading.local()


def note(name, how="calls"):
    if getattr(_quiet, "depth", 0):
        return
    with _lock:
        if not _counts.get(name):
            _how[name] = how
        _counts[name] = _counts.get(name, 0) + 1
        # its first use: a new name, or one seen so far only as an import
        new = _counts[name] == 1
        if name not in _first:
            _first[name] = _site()
    if _tree is not None and not _tree[1]:
        _worker_saves(new)


def seen(name):
    """An import or read of ``name`` that is not a use to count: listed (0
    uses until one), its site the first use."""
    if getattr(_quiet, "depth", 0):
        return
    with _lock:
        if name not in _counts:
            _counts[name] = 0
            _how[name] = "uses (imported)"
        new = name not in _first
        if new:
            _first[name] = _site()
    if _tree is not None and not _tree[1]:
        _worker_saves(new)


_saved_at = 0.0


def _worker_saves(new_name):
    """A worker of a ``pmapkit run`` tree saves its counts when it meets a
    new name or a name's first use, and at most once a second otherwise
    (besides at exit): a pool
    that terminates its workers (``Pool.terminate``, the ``with`` block's
    exit) kills them before their exit handlers run, and the report must
    still list every name they used (their last second of counts may be
    missing)."""
    global _saved_at
    import time
    now = time.monotonic()
    if new_name or now - _saved_at >= 1.0:
        _saved_at = now
        _write_counts(_tree[0])


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
        # pickled by reference to the classic name, which answers with this
        # very function (as jax.tree_map pickled on the classic release)
        counting.__module__, _, counting.__qualname__ = name.rpartition(".")
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


def counting_module(name, module, counted_attrs):
    """A stand-in for ``module`` served as ``name`` while the report is on:
    every read of one of ``counted_attrs`` counts as a use of
    ``name.attr``; everything else is the module's."""
    import types
    proxy = types.ModuleType(name, module.__doc__)

    def __getattr__(attr):
        value = getattr(module, attr)
        if attr in counted_attrs:
            note(f"{name}.{attr}", "reads")
        return value

    proxy.__getattr__ = __getattr__
    proxy.__all__ = list(getattr(module, "__all__", ()))
    return proxy


def _served_by(record):
    if record.name == "jax.pmap":
        return _what_runs_jax_pmap()
    return record.served_by or "refused: a clear error"


@functools.lru_cache(maxsize=1)
def _real_use():
    """``({name: repositories reaching it}, repositories read)`` of the census
    of real use."""
    from pmapkit.legacy import census as legacy_census
    rows = legacy_census.real_use()
    read = len({s.repository for s in legacy_census.real_use_sources()})
    return {r.name: r.repos for r in rows}, read


def real_use_text(name):
    """How many public repositories of the census of real use reach ``name``."""
    counts, read = _real_use()
    return f"{counts.get(name, 0)} of {read} public repositories (2019-2024)"


def entries():
    """The names counted so far, as dicts (the JSON form's ``names``)."""
    counted_so_far = counts()
    if not counted_so_far:
        return []
    from pmapkit.legacy import names as legacy_names
    used = {name: n for name, n in counted_so_far.items() if legacy_names.known(name)}
    out = []
    for name in sorted(used):
        record = legacy_names.by_name(name)
        out.append({"name": name, "removed_in": record.removed_in, "uses": used[name],
                    "how": _how.get(name, "calls"), "first_use": _first.get(name, "?"),
                    "served_by": _served_by(record), "modern": record.modern,
                    "example": record.example,
                    "real_use": _real_use()[0].get(name, 0)})
    return out


def table(wide=False):
    """The migration map of the names counted so far (``format_entries``)."""
    return format_entries(entries(), wide)


def format_entries(rows, wide=False):
    """The migration map of ``rows`` (``entries()``): per name its uses and
    first use, what served it, the modern replacement and an example, within
    ``WIDTH`` columns; ``wide``: one table line per name."""
    if not rows:
        return ("pmapkit.legacy report: this program used none of the classic "
                "names pmapkit stands in for.")
    if wide:
        return _wide_table(rows)
    lines = [f"pmapkit.legacy report: {len(rows)} classic name(s) used "
             f"(--report=wide: one line each)"]
    for e in rows:
        lines.append(_folded(f"{e['name']} (removed in {e['removed_in']})", ""))
        for label, value in (("uses", f"{e['uses']} {e['how']}"),
                             ("first use", e["first_use"]),
                             ("served by", e["served_by"]),
                             ("real use", real_use_text(e["name"])),
                             ("modern JAX", e["modern"]),
                             ("example", e["example"])):
            lines.append(_folded(value, f"    {label:<12}"))
    return "\n".join(lines)


def _folded(text, lead):
    """``lead`` + ``text`` folded to ``WIDTH`` columns, continuation lines
    under the text (a word longer than a line, a path, is cut)."""
    return textwrap.fill(text, WIDTH, initial_indent=lead,
                         subsequent_indent=" " * max(len(lead), 4),
                         break_on_hyphens=False)


def _wide_table(rows):
    cells = [("classic name", "uses", "first use", "served by", "real use", "modern JAX",
              "example")]
    for e in rows:
        cells.append((f"{e['name']} (removed in {e['removed_in']})",
                      f"{e['uses']} {e['how']}", e["first_use"], e["served_by"],
                      f"{e.get('real_use', 0)} repos", e["modern"], e["example"]))
    widths = [max(len(r[i]) for r in cells) for i in range(6)]
    lines = [f"pmapkit.legacy report: {len(rows)} classic name(s) used"]
    for k, row in enumerate(cells):
        lines.append("  " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths))
                     + " | " + row[6])
        if k == 0:
            lines.append("  " + "-+-".join("-" * w for w in widths) + "-+-" + "-" * 7)
    return "\n".join(lines)


def as_json():
    jax = sys.modules.get("jax")
    if jax is not None:
        version = jax.__version__
    else:               # a tree whose top process never imported jax
        from importlib import metadata
        version = metadata.version("jax")
    return json.dumps({"pmapkit_legacy_report": 1, "jax": version,
                       "names": entries()})


def _print_at_exit():
    if _tree is not None:
        folder, top = _tree
        if not top:
            _write_counts(folder)
        return
    _write_report()


def _write_counts(folder):
    with _lock:
        data = {"counts": dict(_counts), "how": dict(_how), "first": dict(_first)}
    if not data["counts"]:
        return
    # One file per process, replaced whole: a reader never sees half of it.
    path = os.path.join(folder, f"{os.getpid()}.json")
    try:
        with open(path + ".part", "w") as f:
            json.dump(data, f)
        os.replace(path + ".part", path)
    except OSError:     # the top process has gone and taken the folder
        pass


def _write_report():
    try:
        sys.stdout.flush()
    except Exception:   # a closed stdout must not hide the report
        pass
    if _form in ("table", "wide"):
        print(table(wide=_form == "wide"), file=sys.stderr, flush=True)
    elif _form == "json":
        print(as_json(), file=sys.stderr, flush=True)
    else:
        with open(_form, "w") as f:
            f.write(as_json() + "\n")
