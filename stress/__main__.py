"""pmapkit's stress pass: try pmapkit as a demanding user would.

    python -m stress [--quick] [--json PATH] [--sections S,...] [--only TEXT]

Five sections (``stress/`` holds the probes):

1. bad inputs: ~280 misuses of pmap, pjit, host_callback, export,
   colocated_python and ``pmapkit launch``, from tables;
2. fuzzed export artifacts: byte flips, truncations and crafted headers and
   payloads with checksums recomputed (400 quick, 4,200 full);
3. concurrency: 12-16 threads on shared pmap/pjit functions (5,000 calls
   quick, 77,000 full); a numpy input written right after each call, on
   every route (``host_writes``: 0 wrong of 400 calls a probe quick);
4. memory: resident set over cached calls (30k quick, 300k full) and under
   shape churn with bounded caches;
5. donation: donated loops, donated inputs used again.

Every probe runs in a worker subprocess bounded by a timeout, so a segfault,
abort or hang is observed and classified (clean / unclear / wrong / crash /
hang / leak, see ``stress/runner.py``), never kills the pass. Prints a table
per section with every probe that is not clean; ``--json`` writes all of it.
Exit status 0 when every counted probe is clean, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

SECTIONS = ("bad_inputs", "fuzz", "concurrency", "memory", "donation")
#: Run only when named: the harness checking its own classification.
EXTRA_SECTIONS = ("selftest",)
#: Probes per worker, by section (fuzz probes are many and cheap).
BATCH_SIZES = {"fuzz": 700}


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m stress",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer fuzzed artifacts, calls and steps (~2 min on 2 cores)")
    parser.add_argument("--json", metavar="PATH", help="write every probe's record here")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {', '.join(SECTIONS)} (or selftest)")
    parser.add_argument("--only", metavar="TEXT",
                        help="run only probes whose name contains TEXT")
    parser.add_argument("--verbose", action="store_true", help="print every probe's outcome")
    parser.add_argument("--keep-workdir", action="store_true",
                        help="keep the workers' logs and batch files")
    parser.add_argument("--artifacts", metavar="DIR",
                        help="keep the fuzzed artifacts of probes that are not clean here "
                             "(default: beside --json, as <json>.artifacts/)")
    opts = parser.parse_args(argv)
    opts.sections = [s.strip() for s in opts.sections.split(",") if s.strip()]
    unknown = [s for s in opts.sections if s not in SECTIONS + EXTRA_SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}; expected some of "
                     f"{list(SECTIONS + EXTRA_SECTIONS)}")
    return opts


def main(argv):
    if argv[:1] == ["--worker"]:
        from stress.runner import worker_main
        return worker_main(*argv[1:4])
    opts = _parse(argv)
    mode = "quick" if opts.quick else "full"

    import jax
    import pmapkit
    from stress import report
    from stress.catalog import build_registry
    from stress.runner import Runner

    reg = build_registry(mode)
    workdir = tempfile.mkdtemp(prefix="pmapkit-stress-")
    printer = (lambda line: print(line, flush=True))
    log = printer if opts.verbose else (
        lambda line: printer(line) if not line.lstrip().startswith("clean") else None)
    runner = Runner(reg, workdir, os.path.abspath(__file__), log=log)
    started = time.time()
    by_section, seconds = {}, {}
    print(f"pmapkit stress pass ({mode}): pmapkit {pmapkit.__version__} "
          f"(compiled: {pmapkit.COMPILED}), jax {jax.__version__}, "
          f"{os.cpu_count()} CPUs; workers in {workdir}", flush=True)
    for section in opts.sections:
        probes = [p for p in reg.in_section(section)
                  if opts.only is None or opts.only in p.name]
        if not probes:
            continue
        print(f"\n== {report.SECTION_TITLES.get(section, section)}: {len(probes)} probes",
              flush=True)
        t0 = time.perf_counter()
        by_section[section] = runner.run(probes, BATCH_SIZES.get(section, 80))
        seconds[section] = round(time.perf_counter() - t0, 1)
        print(f"   {report.summary_line(by_section[section])} in {seconds[section]} s",
              flush=True)

    print()
    for section, records in by_section.items():
        print(report.section_table(section, records))
        print()
    if "selftest" in by_section:
        from stress import selftest
        off = selftest.check(by_section.pop("selftest"))
        print("harness self-test: " + ("every outcome as announced" if not off else
              "NOT as announced: " + ", ".join(f"{r['name']} -> {r['outcome']}" for r in off)))
        if off:
            return 2
    if "fuzz" in by_section:
        _keep_mutants(by_section["fuzz"], workdir, opts.artifacts or (
            opts.json and opts.json + ".artifacts"))
    everything = [r for records in by_section.values() for r in records]
    total_s = round(time.time() - started, 1)
    print(f"all sections: {report.summary_line(everything)} in {total_s} s")
    if opts.json:
        meta = {"mode": mode, "pmapkit": pmapkit.__version__, "compiled": pmapkit.COMPILED,
                "jax": jax.__version__, "python": platform.python_version(),
                "cpus": os.cpu_count(), "started": time.strftime(
                    "%Y-%m-%dT%H:%M:%S", time.localtime(started)),
                "seconds": total_s, "section_seconds": seconds,
                "command": " ".join(["python", "-m", "stress", *argv])}
        with open(opts.json, "w") as f:
            json.dump(report.to_json(meta, by_section), f, indent=1)
        print(f"wrote {opts.json}")
    if not opts.keep_workdir:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    clean = all(r["outcome"] == "clean" for r in everything if not r["reference"])
    return 0 if clean else 1


def _keep_mutants(records, workdir, keep_dir):
    """Copy the fuzzed artifacts of non-clean probes to ``keep_dir``."""
    import shutil
    from stress.fuzz import mutant_of
    bad = [r for r in records if r["outcome"] != "clean"]
    if not bad or not keep_dir:
        return
    os.makedirs(keep_dir, exist_ok=True)
    for r in bad:
        source = os.path.join(workdir, mutant_of(r["name"]))
        if os.path.exists(source):
            target = os.path.join(keep_dir, os.path.basename(source))
            shutil.copyfile(source, target)
            r["details"] = dict(r.get("details") or {}, mutant=target)
    print(f"kept the artifacts of {len(bad)} fuzz probes that are not clean in {keep_dir}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
