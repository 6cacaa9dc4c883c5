"""``python -m pmapkit bench``: the dispatch benchmark report.

    python -m pmapkit bench [--quick | --full] [--json PATH] [--plot PATH]
                            [--cases SUBSTRING]

Runs the cases of ``pmapkit.tools.bench`` under every impl (jax.pmap, jax.jit,
pmapkit, raw) and prints one table: microseconds per call of caller-thread CPU
time (``time.thread_time``; device execution on XLA's threads is left out),
the median of interleaved rounds, with the ratios pmapkit/jax.pmap,
pmapkit/jax.jit and pmapkit/raw (raw: the bare execute + result handlers on
pmapkit's own compiled program, the floor). The first-call row is wall time
(trace + lower + compile + run of a fresh function). The footer reports
resident-memory growth over many cached pmapkit calls.

``--quick`` (default) keeps the whole run well under two minutes on a
two-core host; ``--full`` measures longer. Both run the memory check over
100,000 calls (and a second window of 100,000 to tell a leak from
allocator warm-up). ``--json`` writes machine-readable results; ``--plot`` a PNG
bar chart (needs matplotlib: ``pip install 'pmapkit[plot]'``).

Devices: ``python -m pmapkit bench`` forces 8 CPU devices before jax starts.
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

SETTINGS = {
    # rounds: interleaved rounds per case; target_s: seconds per measurement;
    # first_call_rounds: fresh functions compiled per impl; mem_calls: calls
    # of the memory check (reported scaled to MEM_REPORT_CALLS if different).
    "quick": dict(rounds=7, target_s=0.03, first_call_rounds=3, mem_calls=100_000),
    "full": dict(rounds=11, target_s=0.25, first_call_rounds=7, mem_calls=100_000),
}
MEM_REPORT_CALLS = 100_000

RATIOS = (("pmapkit", "jax.pmap"), ("pmapkit", "jax.jit"), ("pmapkit", "raw"))


def _parse(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pmapkit bench",
        description="Per-call dispatch cost: jax.pmap vs jax.jit vs pmapkit vs raw.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="short run, under 2 minutes on 2 cores (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="longer, steadier measurements")
    parser.set_defaults(mode="quick")
    parser.add_argument("--json", metavar="PATH", help="write results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG bar chart "
                        "(needs matplotlib)")
    parser.add_argument("--multiprocess", action="store_true",
                        help="also run the multi-process feature cases (they "
                             "launch local processes; not part of --quick)")
    parser.add_argument("--cases", metavar="SUBSTRING",
                        help="only cases whose name contains SUBSTRING (e.g. "
                             "8_devices, _dispatch_, pjit; 'memory': only the "
                             "memory check)")
    return parser.parse_args(argv)


def _import_pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


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


def _ratios(rows):
    by = {}
    for r in rows:
        by.setdefault(r["case"], {})[r["impl"]] = r
    out = {}
    for case, impls in by.items():
        entry = {}
        for a, b in RATIOS:
            if a in impls and b in impls:
                entry[f"{a}/{b}"] = {
                    "cpu": impls[a]["cpu_us"] / impls[b]["cpu_us"],
                    "wall": impls[a]["wall_us"] / impls[b]["wall_us"]}
        out[case] = entry
    return out


def _shown(row):
    # The first-call row is about latency: wall time, as JAX reports it.
    return row["wall_us"] if row["mode"] == "first_call" else row["cpu_us"]


def _ratio_names(impls):
    return [f"{a}/{b}" for a, b in RATIOS if a in impls and b in impls]


def format_table(rows, ratios, impls):
    """The table, then the cases' notes, each marked ``(n)`` after its case."""
    by = {}
    for r in rows:
        by.setdefault(r["case"], {})[r["impl"]] = r
    notes = {}
    for c, v in by.items():
        note = next(iter(v.values())).get("note")
        if note:
            notes[c] = (len(notes) + 1, note)
    label = {c: c + (" [wall]" if any(r["mode"] == "first_call" for r in v.values())
                     else "") + (f" ({notes[c][0]})" if c in notes else "")
             for c, v in by.items()}
    w0 = max([len("case")] + [len(s) for s in label.values()])
    ratio_names = _ratio_names(impls)
    head = (f"{'case':<{w0}}" + "".join(f"{i:>11}" for i in impls)
            + "".join(f"{n:>18}" for n in ratio_names))
    lines = [head, "-" * len(head)]
    for case, impl_rows in by.items():
        cells = []
        for impl in impls:
            r = impl_rows.get(impl)
            cells.append(f"{_shown(r):>11.2f}" if r else f"{'-':>11}")
        for n in ratio_names:
            rr = ratios.get(case, {}).get(n)
            key = "wall" if any(r["mode"] == "first_call" for r in impl_rows.values()) \
                else "cpu"
            cells.append(f"{rr[key]:>18.2f}" if rr else f"{'-':>18}")
        lines.append(f"{label[case]:<{w0}}" + "".join(cells))
    lines += [f"({n}) {case}: {note}" for case, (n, note) in notes.items()]
    return "\n".join(lines)


def write_plot(path, rows, impls, plt):
    by = {}
    for r in rows:
        by.setdefault(r["case"], {})[r["impl"]] = r
    cases = list(by)
    colors = {"jax.pmap": "tab:blue", "jax.jit": "tab:orange",
              "pmapkit": "tab:green", "raw": "tab:gray"}
    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(max(10, 0.75 * len(cases) + 2), 6.5))
    for k, impl in enumerate(impls):
        xs, ys = [], []
        for j, case in enumerate(cases):
            r = by[case].get(impl)
            if r is not None:
                xs.append(j - 0.4 + width * (k + 0.5))
                ys.append(_shown(r))
        ax.bar(xs, ys, width, label=impl, color=colors.get(impl))
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c + (" [wall]" if any(r["mode"] == "first_call"
                                              for r in by[c].values()) else "")
                        for c in cases], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("µs per call (caller-thread CPU; [wall]: wall time)")
    ax.set_title("pmapkit dispatch cost per call (lower is better)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _skipped_lines(skipped, bench):
    """'not run (reason): what' lines; a case whose every impl was skipped
    for one reason is named once, otherwise 'case[impl]'."""
    by_reason = {}
    for s in skipped:
        by_reason.setdefault(s["reason"], {}).setdefault(s["case"], []).append(s["impl"])
    lines = []
    for reason, cases in by_reason.items():
        names = []
        for case, impls in cases.items():
            if set(impls) == set(bench.CASES_BY_NAME[case].impls):
                names.append(case)
            else:
                names += [f"{case}[{i}]" for i in impls]
        lines.append(f"not run ({reason}): {', '.join(names)}")
    return lines


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    plt = None
    if args.plot:
        plt = _import_pyplot()
        if plt is None:
            print("python -m pmapkit bench: --plot needs matplotlib, which is not "
                  "installed; install it with `pip install 'pmapkit[plot]'` (or "
                  "`pip install matplotlib`), or drop --plot.", file=sys.stderr)
            return 2

    import jax

    import pmapkit
    from pmapkit.tools.bench import engine as bench
    from pmapkit.tools.bench import features

    settings = SETTINGS[args.mode]
    load_start = _loadavg()
    start = time.perf_counter()
    cases = bench.select_cases(args.cases, include_unavailable=True)
    all_features, feature_errors = features.load_cases()
    feature_cases = features.select(all_features, args.cases, args.multiprocess)
    if not cases and not feature_cases and args.cases != "memory":
        print(f"no case name contains {args.cases!r}; cases: "
              + ", ".join([c.name for c in bench.CASES]
                          + [c.name for c in all_features]), file=sys.stderr)
        return 2
    devices = jax.devices()
    rows, skipped = [], []
    cache = bench.RunnerCache()
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

    ratios = _ratios(rows)
    impls = [i for i in bench.IMPLS if any(r["impl"] == i for r in rows)]
    if rows:
        print(format_table(rows, ratios, impls))
        print()
    print(f"µs per call of caller-thread CPU (time.thread_time), median of "
          f"{settings['rounds']} interleaved rounds ({args.mode}); [wall] rows: "
          f"wall-clock µs of one first call (trace+lower+compile+run), median "
          f"of {settings['first_call_rounds']}.")
    print("*_dispatch_* rows: calls only, blocking untimed every "
          f"{bench.BLOCK_EVERY} calls; other rows: call + block_until_ready. "
          "raw: bare execute_sharded + result handlers on pmapkit's program.")
    for line in _skipped_lines(skipped, bench):
        print(line)
    if feature_results:
        print()
        print(features.format_table(feature_results))
    for module, error in feature_errors.items():
        print(f"feature cases of {module} not loaded: {error}")
    if memory is not None:
        kib = memory["growth_bytes"] / 1024
        line = (f"memory: resident set {memory['rss_before_bytes'] / 2**20:.1f} MiB -> "
                f"{memory['rss_after_bytes'] / 2**20:.1f} MiB ({kib:+.0f} KiB, "
                f"{memory['growth_bytes_per_call']:+.3f} B/call) over "
                f"{memory['calls']:,} cached pmapkit calls of pmap_trivial_1_devices")
        if memory["calls"] != MEM_REPORT_CALLS:
            line += (f"; scaled to {MEM_REPORT_CALLS:,} calls: "
                     f"{memory['growth_bytes_scaled'] / 1024:+.0f} KiB")
        print(line)
        later = memory["window_growth_bytes"][1:]
        if later:
            print(f"        next {len(later)} x {memory['calls']:,} calls: "
                  + ", ".join(f"{g / 1024:+.0f} KiB" for g in later)
                  + " (a steady leak grows alike in every window)")
    print(f"jax {jax.__version__}, pmapkit {pmapkit.__version__} (compiled core: "
          f"{pmapkit.COMPILED}), {len(devices)} {devices[0].platform} devices, "
          f"python {_platform.python_version()}, {elapsed:.1f} s; "
          f"{os.cpu_count()} host CPUs, load average {load_start} -> {load_end}")

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
            "results": [dict(r, ratios=ratios.get(r["case"], {})) for r in rows],
            "ratios": ratios,
            "memory": memory,
            "skipped": skipped,
            "features": [{"case": c.name, "baseline": c.baseline,
                          "higher_is_better": c.higher_is_better,
                          "ratio": features.ratio(c, r), "rows": r}
                         for c, r in feature_results],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        _log(f"wrote {args.json}")
    if args.plot:
        if rows:
            write_plot(args.plot, rows, impls, plt)
            _log(f"wrote {args.plot}")
        else:
            _log("no case measured: no plot written")
    return 0


if __name__ == "__main__":
    from pmapkit.tools.demo import configure_devices
    configure_devices()
    sys.exit(main())
