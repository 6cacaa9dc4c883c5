"""``pmapkit bench``: the dispatch benchmark report.

    pmapkit bench [--quick | --full] [--wide] [--json PATH] [--plot PATH]
                  [--cases SUBSTRING] [--multiprocess]

Runs the cases of ``pmapkit.tools.bench`` under every impl (jax.pmap, jax.jit,
pmapkit, raw) and prints one table: microseconds per call of caller-thread CPU
time (``time.thread_time``; device execution on XLA's threads is left out),
the median of interleaved rounds, with the ratios pmapkit/jax.pmap and
pmapkit/jax.jit (``--wide``: also pmapkit/raw, raw being the bare execute +
result handlers on pmapkit's own compiled program, the floor). The
first-call row is wall time (trace + lower + compile + run of a fresh
function). Then the feature cases, the resident-memory growth over many
cached pmapkit calls, and a closing summary: per pattern, pmapkit's cost over
jax.pmap's and jax.jit's (``report``). Within 100 columns unless ``--wide``.

``--quick`` (default) keeps the whole run under two minutes on a two-core
host: fewer, shorter rounds, a representative half of the dispatch cases
(``engine.QUICK_CASES``), a 30,000-call memory check, and no feature case
that starts new Python processes (``--full`` runs every case, and so does
naming them with ``--cases``). ``--full`` measures longer, with a 100,000-call
memory check (and a second window, to tell a leak from allocator warm-up).
``--json`` writes machine-readable results; ``--plot`` a PNG of the ratios
(``plot``; needs matplotlib: ``pip install 'pmapkit[plot]'``).

Devices: ``pmapkit bench`` forces 8 CPU devices before jax starts.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform as _platform
import statistics
import sys
import time

from pmapkit.tools.bench import report

SETTINGS = {
    # rounds: interleaved rounds per case; target_s: seconds per measurement;
    # first_call_rounds: fresh functions compiled per impl; mem_calls: calls
    # of the memory check (reported scaled to MEM_REPORT_CALLS if different);
    # fresh_processes: run the feature cases that start new processes.
    # all_cases: every dispatch case, not only engine.QUICK_CASES.
    "quick": dict(rounds=5, target_s=0.012, first_call_rounds=2, mem_calls=30_000,
                  fresh_processes=False, all_cases=False),
    "full": dict(rounds=11, target_s=0.25, first_call_rounds=7, mem_calls=100_000,
                 fresh_processes=True, all_cases=True),
}
MEM_REPORT_CALLS = 100_000


def _parser(prog):
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Per-call dispatch cost of pmapkit side by side with jax.pmap, "
                    "jax.jit and the raw floor, the feature cases against their JAX "
                    "equivalents, and a closing summary per pattern. Forces 8 CPU "
                    "devices.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="short run, under 2 minutes on 2 cores, without the "
                           "cases that start new processes (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="longer, steadier measurements, every case")
    parser.set_defaults(mode="quick")
    parser.add_argument("--wide", action="store_true",
                        help="the table with every ratio column and unrounded "
                             "numbers, however wide (default: 100 columns)")
    parser.add_argument("--json", metavar="PATH", help="write results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of the ratios, "
                        "grouped by pattern (needs matplotlib)")
    parser.add_argument("--multiprocess", action="store_true",
                        help="also run the multi-process feature cases (they "
                             "launch local processes; not part of --quick)")
    parser.add_argument("--cases", metavar="SUBSTRING",
                        help="only cases whose name contains SUBSTRING (e.g. "
                             "8_devices, _dispatch_, pjit; 'memory': only the "
                             "memory check)")
    return parser


def _loadavg():
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_case(case, settings, bench, cache):
    """Measure every impl of ``case``; returns (rows, skipped)."""
    runners, skipped = {}, []
    for impl in case.impls:
        try:
            runners[impl] = cache.get(case, impl)
        except bench.Unavailable as exc:
            skipped.append({"case": case.name, "impl": impl, "reason": str(exc)})
    if case.mode == "first_call":
        rounds, calls = settings["first_call_rounds"], {i: 1 for i in runners}
    else:
        rounds = settings["rounds"]
        calls = {i: bench.calibrate(r, settings["target_s"]) for i, r in runners.items()}
    samples = {impl: [] for impl in runners}
    gc.collect()
    for _ in range(rounds):  # interleaved: drifts hit every impl alike
        for impl, runner in runners.items():
            samples[impl].append(bench.measure(runner, calls[impl]))
    rows = []
    for impl, s in samples.items():
        cpu = [c for c, _ in s]
        wall = [w for _, w in s]
        rows.append({
            "case": case.name, "impl": impl, "family": case.family,
            "mode": case.mode, "devices": case.ndev, "note": case.note,
            "cpu_us": statistics.median(cpu), "wall_us": statistics.median(wall),
            "calls_per_round": calls[impl], "rounds": rounds,
            "cpu_us_rounds": cpu, "wall_us_rounds": wall,
        })
    return rows, skipped


def main(argv=None, prog="python -m pmapkit bench", before_jax=None):
    """``pmapkit bench``; ``before_jax()`` (the device set-up) runs once the
    command line is read, so ``--help`` and usage errors start nothing."""
    args = _parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    plt = None
    if args.plot:
        from pmapkit.tools.bench import plot
        plt = plot.import_pyplot()
        if plt is None:
            print(f"{prog}: --plot needs matplotlib, which is not installed; install "
                  "it with `pip install 'pmapkit[plot]'` (or `pip install "
                  "matplotlib`), or drop --plot.", file=sys.stderr)
            return 2
    if before_jax is not None:
        before_jax()

    import jax

    import pmapkit
    from pmapkit.tools.bench import engine as bench
    from pmapkit.tools.bench import features

    settings = SETTINGS[args.mode]
    load_start = _loadavg()
    start = time.perf_counter()
    # A case named with --cases runs whatever the mode.
    named = args.cases is not None
    cases = bench.select_cases(args.cases, include_unavailable=True,
                               quick=not (settings["all_cases"] or named))
    all_features, feature_errors = features.load_cases()
    fresh_processes = settings["fresh_processes"] or named
    feature_cases = features.select(all_features, args.cases, args.multiprocess,
                                    fresh_processes=fresh_processes)
    left_out = [c.name for c in features.select(all_features, args.cases,
                                                args.multiprocess)
                if c not in feature_cases]
    if not cases and not feature_cases and args.cases != "memory":
        print(f"no case name contains {args.cases!r}; cases: "
              + ", ".join([c.name for c in bench.CASES]
                          + [c.name for c in all_features]), file=sys.stderr)
        return 2
    devices = jax.devices()
    rows, skipped = [], []
    cache = bench.RunnerCache()
    # What is alive now stays alive: frozen, the full collection before each
    # case (no collection during its rounds) costs microseconds, not ~65 ms.
    gc.collect()
    gc.freeze()
    for n, case in enumerate(cases, 1):
        reason = case.unavailable_reason()
        if reason is not None:
            skipped += [{"case": case.name, "impl": i, "reason": reason}
                        for i in case.impls]
            continue
        _log(f"[{n}/{len(cases)}] {case.name}")
        case_rows, case_skipped = run_case(case, settings, bench, cache)
        rows += case_rows
        skipped += case_skipped

    cache.clear()
    feature_results = []
    for n, case in enumerate(feature_cases, 1):
        _log(f"[feature {n}/{len(feature_cases)}] {case.name}")
        feature_results.append((case, case.run(settings)))
    gc.unfreeze()
    memory = None
    if (args.cases is None or args.cases == "memory"
            or args.cases in "pmap_trivial_1_devices"):
        _log(f"memory check: {settings['mem_calls']:,} cached pmapkit calls")
        memory = bench.memory_growth(settings["mem_calls"])
        memory["scaled_to_calls"] = MEM_REPORT_CALLS
        memory["growth_bytes_scaled"] = (memory["growth_bytes_per_call"]
                                         * MEM_REPORT_CALLS)
    elapsed = time.perf_counter() - start
    load_end = _loadavg()

    case_ratios = report.ratios(rows)
    ratio_list = report.ratio_rows(rows, feature_results, features)
    summary = report.summarize(ratio_list)
    impls = [i for i in bench.IMPLS if any(r["impl"] == i for r in rows)]
    wide = args.wide

    def say(text=""):
        print(report.wrap(text, wide))

    if rows:
        print(report.format_table(rows, case_ratios, impls, wide=wide))
        print()
        say(f"µs per call of caller-thread CPU (time.thread_time), median of "
            f"{settings['rounds']} interleaved rounds ({args.mode}); [wall] rows: "
            f"wall-clock µs of one first call (trace+lower+compile+run), median "
            f"of {settings['first_call_rounds']}.")
        say("*_dispatch_* rows: calls only, blocking untimed every "
            f"{bench.BLOCK_EVERY} calls; other rows: call + block_until_ready. "
            "raw: bare execute_sharded + result handlers on pmapkit's program.")
    for line in report.skipped_lines(skipped, lambda c: bench.CASES_BY_NAME[c].impls):
        say(line)
    if not (settings["all_cases"] or named):
        say(f"--{args.mode} ran {len(cases)} of the {len(bench.CASES)} dispatch cases "
            "(engine.QUICK_CASES); --full runs them all, --cases any you name.")
    if left_out:
        say(f"not run in --{args.mode} (they start new processes; --full runs "
            f"them, or name them with --cases): {', '.join(left_out)}")
    if feature_results:
        print()
        print(features.format_table(feature_results, wide=wide))
    for module, error in feature_errors.items():
        say(f"feature cases of {module} not loaded: {error}")
    if memory is not None:
        kib = memory["growth_bytes"] / 1024
        line = (f"memory: resident set {memory['rss_before_bytes'] / 2**20:.1f} MiB -> "
                f"{memory['rss_after_bytes'] / 2**20:.1f} MiB ({kib:+.0f} KiB, "
                f"{memory['growth_bytes_per_call']:+.3f} B/call) over "
                f"{memory['calls']:,} cached pmapkit calls of pmap_trivial_1_devices")
        if memory["calls"] != MEM_REPORT_CALLS:
            line += (f"; scaled to {MEM_REPORT_CALLS:,} calls: "
                     f"{memory['growth_bytes_scaled'] / 1024:+.0f} KiB")
        say(line)
        later = memory["window_growth_bytes"][1:]
        if later:
            say(f"        next {len(later)} x {memory['calls']:,} calls: "
                + ", ".join(f"{g / 1024:+.0f} KiB" for g in later)
                + " (a steady leak grows alike in every window)")
    say(f"jax {jax.__version__}, pmapkit {pmapkit.__version__} (compiled core: "
        f"{pmapkit.COMPILED}), {len(devices)} {devices[0].platform} devices, "
        f"python {_platform.python_version()}, {elapsed:.1f} s; "
        f"{os.cpu_count()} host CPUs, load average {load_start} -> {load_end}")
    if summary:
        print()
        print(report.format_summary(summary))

    if args.json:
        doc = {
            "meta": {
                "jax_version": jax.__version__,
                "jaxlib_version": getattr(__import__("jaxlib"), "__version__", None),
                "pmapkit_version": pmapkit.__version__,
                "pmapkit_compiled": pmapkit.COMPILED,
                "device_count": len(devices),
                "platform": devices[0].platform,
                "host": _platform.platform(),
                "host_cpus": os.cpu_count(),
                "load_average_start": load_start, "load_average_end": load_end,
                "python": _platform.python_version(),
                "mode": args.mode, "settings": settings,
                "cases_filter": args.cases, "elapsed_s": elapsed,
                "units": "microseconds per call; cpu = caller-thread CPU "
                         "(time.thread_time), wall = perf_counter",
            },
            "results": [dict(r, ratios=case_ratios.get(r["case"], {})) for r in rows],
            "ratios": case_ratios,
            "memory": memory,
            "skipped": skipped,
            "not_run_in_mode": left_out,
            "features": [{"case": c.name, "baseline": c.baseline,
                          "subject": features.subject_impl(c, r),
                          "higher_is_better": c.higher_is_better,
                          "ratio": features.ratio(c, r), "rows": r}
                         for c, r in feature_results],
            "summary": summary,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        _log(f"wrote {args.json}")
    if args.plot:
        if ratio_list:
            plot.write_plot(args.plot, ratio_list, plt)
            _log(f"wrote {args.plot}")
        else:
            _log("no ratio measured: no plot written")
    return 0


if __name__ == "__main__":
    from pmapkit.tools.demo import configure_devices
    sys.exit(main(before_jax=configure_devices))
