"""Feature benchmark cases: host_callback, export, colocated_python, multi-process.

The dispatch cases (``pmapkit.tools.bench.engine``) time one call under four impls. A
feature case measures something else (taps per second, serialize+load+first
call, ...) for pmapkit and its JAX equivalent, side by side in one run. Each
feature keeps its cases in a module of its own (``features_<feature>.py``) and
registers them with ``@feature_case``; the module is listed in
``FEATURE_MODULES`` so ``python -m pmapkit bench`` imports it.

A case function takes the settings dict of the run (``"quick"`` or
``"full"``: ``settings["rounds"]``, ``settings["target_s"]``) and returns rows,
one per impl: ``{"impl": str, "value": float, "unit": str}`` plus any extra
keys worth keeping in the JSON. The report prints every row and the ratio
``subject / baseline`` of each case (``baseline`` names the JAX impl,
``subject`` what is set against it: pmapkit unless the case says otherwise).
"""
from __future__ import annotations

import dataclasses
import importlib
import statistics
import time
from collections.abc import Callable

#: Modules holding feature cases; one that fails to import is reported, not fatal.
FEATURE_MODULES: tuple[str, ...] = (
    "pmapkit.tools.bench.features_fidelity",
    "pmapkit.tools.bench.features_nested",
    "pmapkit.tools.bench.features_host_callback",
    "pmapkit.tools.bench.features_export",
    "pmapkit.tools.bench.features_startup",
    "pmapkit.tools.bench.features_colocated",
    "pmapkit.tools.bench.features_debugging",
    "pmapkit.tools.bench.features_multiprocess",
    "pmapkit.tools.bench.features_wrappers",
    "pmapkit.tools.bench.features_edges",
    "pmapkit.tools.bench.features_migrate",
    "pmapkit.tools.bench.features_legacy",
)


@dataclasses.dataclass(frozen=True)
class FeatureCase:
    name: str                     # e.g. "host_callback_id_tap_taps_per_s"
    run: Callable                 # settings -> list of row dicts
    baseline: str                 # the impl ratios divide by (JAX's equivalent)
    higher_is_better: bool        # taps/s: True; µs per call: False
    multiprocess: bool = False    # only with ``bench --multiprocess``
    # Starts new Python processes (seconds each on 2 cores): not in --quick.
    fresh_processes: bool = False
    # The impl set against the baseline (the ratio's numerator); a case whose
    # rows have no impl of this name compares its last row that is not the
    # baseline, under that row's own name.
    subject: str = "pmapkit"


_REGISTRY: dict[str, FeatureCase] = {}


def feature_case(name, *, baseline, higher_is_better, multiprocess=False,
                 fresh_processes=False, subject="pmapkit"):
    """Register the decorated ``run(settings) -> rows`` as case ``name``."""
    def register(run):
        if name in _REGISTRY:
            raise ValueError(f"feature benchmark case {name!r} registered twice")
        _REGISTRY[name] = FeatureCase(name, run, baseline, higher_is_better,
                                      multiprocess, fresh_processes, subject)
        return run
    return register


def load_cases():
    """(cases in registration order, {module: import error text})."""
    errors = {}
    for module in FEATURE_MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:  # a broken feature must not hide the others
            errors[module] = f"{type(exc).__name__}: {exc}"
    return list(_REGISTRY.values()), errors


def select(cases, substring=None, multiprocess=False, fresh_processes=True):
    """The cases to run: the ``multiprocess`` ones only when asked for, the
    ``fresh_processes`` ones unless told not to."""
    return [c for c in cases
            if (multiprocess or not c.multiprocess)
            and (fresh_processes or not c.fresh_processes)
            and (substring is None or substring in c.name)]


def subject_impl(case, rows):
    """The impl of ``rows`` compared with the baseline: ``case.subject`` if a
    row has it, else the last row that is not the baseline (None if none)."""
    impls = [r["impl"] for r in rows]
    if case.subject in impls:
        return case.subject
    others = [i for i in impls if i != case.baseline]
    return others[-1] if others else None


def ratio(case, rows):
    """The subject's value over the baseline's, or None if either is missing."""
    by_impl = {r["impl"]: r["value"] for r in rows}
    ours, theirs = by_impl.get(subject_impl(case, rows)), by_impl.get(case.baseline)
    if ours is None or not theirs:
        return None
    return ours / theirs


def format_table(results, wide=False):
    """``results``: list of (case, rows). Per case a heading line, then one
    line per row; the subject's row ends with its ratio to the baseline,
    named (``0.52x jax.pmap``). Within 100 columns unless ``wide`` (then
    impl names are never shortened)."""
    if not results:
        return ""
    impl_w = max(len(r["impl"]) for _, rows in results for r in rows)
    if not wide:
        impl_w = min(impl_w, 34)
    lines = ["feature cases: each case's rows, the subject's ratio to the baseline"]
    for case, rows in results:
        better = "higher" if case.higher_is_better else "lower"
        lines.append(f"{case.name}  ({better} is better)")
        r, subject = ratio(case, rows), subject_impl(case, rows)
        for row in rows:
            shown = f"{r:.2f}x {case.baseline}" if (r is not None and row["impl"] == subject) \
                else ""
            lines.append(f"  {_shorten(row['impl'], impl_w):<{impl_w}}"
                         f"{row['value']:>13.3f} {shown_unit(row['unit']):<20}{shown}"
                         .rstrip())
    return "\n".join(lines)


def shown_unit(unit):
    """A row's unit as the tables spell it (``us/call cpu`` and ``µs/call
    CPU`` are one unit): µs, CPU."""
    words = unit.split(" ")
    if words[0].startswith("us/") or words[0] == "us":
        words[0] = "µs" + words[0][2:]
    return " ".join("CPU" if w == "cpu" else w for w in words)


def _shorten(text, width):
    return text if len(text) <= width else text[:width - 1] + "…"


def interleaved_cpu_us(impls, cpu_us, settings, baseline, warmup, max_calls):
    """Rows of the median caller-CPU µs per call of each impl.

    ``cpu_us(fn, calls)`` times ``calls`` calls of one impl. Each impl is
    warmed up with ``warmup`` calls; calls per round are calibrated on
    ``baseline`` to ``settings["target_s"]`` (at most ``max_calls``); rounds
    run every impl, alternating their order, so drift hits all alike."""
    for fn in impls.values():
        cpu_us(fn, warmup)  # first call (discovery, compile) and warm-up
    probe = time.perf_counter()
    cpu_us(impls[baseline], warmup)
    per_call = max((time.perf_counter() - probe) / warmup, 1e-7)
    calls = int(min(max_calls, max(warmup, settings["target_s"] / per_call)))
    samples = {name: [] for name in impls}
    for k in range(settings["rounds"]):
        order = list(impls.items())
        if k % 2:
            order.reverse()
        for name, fn in order:
            samples[name].append(cpu_us(fn, calls))
    return [{"impl": name, "value": statistics.median(values), "unit": "us/call cpu",
             "calls": calls, "rounds": settings["rounds"]}
            for name, values in samples.items()]
