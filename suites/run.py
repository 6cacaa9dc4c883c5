"""Real libraries' own test suites under ``pmapkit run`` (issue 48 item 3).

    python suites/run.py venv      # the suites' venv: pmapkit (editable) + the libraries' deps
    python suites/run.py build     # the trees, from snapshots, into the cache folder
    python suites/run.py run  [--suite NAME ...] [--mode stock|run|route ...] [--out DIR]
    python suites/run.py table --out DIR [--merge DIR ...] [--before DIR]

``suites.toml`` lists the libraries (repository, commit, test files, why);
``classified.toml`` says, per failing test, why it fails (library or Python
drift, impossible on JAX 0.10, or pmapkit's). Nothing here imports pmapkit:
each test file runs in its own process, bounded by ``timeout``:

* ``stock``: ``python -m pytest FILE`` on plain JAX 0.10.2 (the reference);
* ``run``:   ``python -m pmapkit run -m pytest FILE``;
* ``route``: ``python -m pmapkit run --route-pmap -m pytest FILE``.

The trees and results live outside the checkout (``--cache``, default
``/work/cache/suites``); they are never committed. Snapshots come from the
search tool's ``fetch`` (``github:OWNER/NAME``), a bare git directory under
``--mirror`` (default ``/work/.mirror``).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
MODES = {
    "stock": ["-m", "pytest"],
    "run": ["-m", "pmapkit", "run", "-m", "pytest"],
    "route": ["-m", "pmapkit", "run", "--route-pmap", "-m", "pytest"],
}
PYTEST_ARGS = ["-p", "no:cacheprovider", "-q", "-rfE"]


def load(name):
    with open(os.path.join(HERE, name), "rb") as f:
        return tomllib.load(f)


def suites(selected=None):
    listed = load("suites.toml")["suite"]
    if selected:
        unknown = set(selected) - {s["name"] for s in listed}
        if unknown:
            raise SystemExit(f"unknown suite(s): {sorted(unknown)}")
        listed = [s for s in listed if s["name"] in selected]
    return listed


def git_dir(mirror, repo):
    base = os.path.join(mirror, repo.replace("/", "+"), "repo")
    for candidate in (os.path.join(base, ".git"), base):
        if os.path.isfile(os.path.join(candidate, "HEAD")):
            return candidate
    raise SystemExit(f"no snapshot of {repo} under {mirror}: fetch github:{repo} first")


def cmd_venv(args):
    venv = args.venv
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    deps = sorted({p for s in suites() for p in s["pip"]})
    pip = [os.path.join(venv, "bin", "pip"), "install", "-q"]
    subprocess.run([*pip, f"{CHECKOUT}[test]", *deps], check=True)
    # the checkout as a plain path entry (after PYTHONPATH, so --pmapkit-src
    # can put another pmapkit, the baseline's, first)
    subprocess.run([*pip, "--no-deps", "-e", CHECKOUT, "--config-settings",
                    "editable_mode=compat"], check=True)


def cmd_build(args):
    for s in suites(args.suite):
        gd = git_dir(args.mirror, s["repo"])
        tree = os.path.join(args.cache, s["name"])
        shutil.rmtree(tree, ignore_errors=True)
        os.makedirs(tree)
        archive = subprocess.run(["git", f"--git-dir={gd}", "archive", s["commit"]],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        print(f"{s['name']}: {s['repo']} @ {s['commit'][:12]} ({s['date']}) -> {tree}")


def _environment(s, args):
    env = dict(os.environ)
    tree = os.path.join(args.cache, s["name"])
    paths = [os.path.join(tree, p) for p in s["paths"]]
    for dep in s["era_deps"]:
        dep_suite = suites([dep])[0]
        paths += [os.path.join(args.cache, dep, p) for p in dep_suite["paths"]]
    if args.pmapkit_src:
        paths.insert(0, args.pmapkit_src)
    paths += args.extra_path or []
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["JAX_PLATFORMS"] = "cpu"
    if s["devices"]:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={s['devices']}"
    else:   # the tests set the device count themselves, as in their CI
        env.pop("XLA_FLAGS", None)
    env.pop("PMAPKIT_REPORT", None)
    return env, tree


def _collection_error(text):
    """The line that says why a file did not import."""
    lines = [l.strip() for l in text.splitlines()]
    errors = [l[1:].strip() for l in lines if l.startswith("E ") and "Error" in l]
    return errors[-1] if errors else (lines[-1] if lines else "")


def read_junit(path, test_file):
    """{test id: (outcome, message)} and the collection error of the file, if any."""
    outcomes, import_error = {}, None
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error",
                           "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "").strip()
                if child.tag != "skipped":
                    message = _first_error(child.text or "", message)
                break
        if outcome == "error" and (message.startswith("collection failure")
                                   or not case.get("classname")):
            import_error = _collection_error(case.find("error").text or "")
            continue
        outcomes[name] = (outcome, message[:300])
    return outcomes, import_error


def _first_error(text, message):
    """The exception line of a failure (the last ``E   SomeError: ...``)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("E ") and re.match(r"E\s+[\w.]*(Error|Exception|Exit)\b", line):
            return line[1:].strip()
    return message.splitlines()[0] if message else ""


def run_file(s, mode, test_file, args, out_dir):
    env, tree = _environment(s, args)
    python = os.path.join(args.venv, "bin", "python")
    tag = f"{s['name']}__{mode}__{test_file.replace('/', '_')}"
    xml = os.path.join(out_dir, tag + ".xml")
    log = os.path.join(out_dir, tag + ".log")
    if os.path.exists(xml):
        os.remove(xml)
    select = s.get("select", {}).get(test_file)
    command = ["timeout", str(args.timeout), python, *MODES[mode], *PYTEST_ARGS,
               *s.get("pytest_args", []), *(["-k", select] if select else []),
               f"--junitxml={xml}", test_file]
    with open(log, "w") as f:
        f.write(shlex.join(command) + "\n")
        f.flush()
        rc = subprocess.run(command, cwd=tree, env=env, stdout=f,
                            stderr=subprocess.STDOUT).returncode
    result = {"file": test_file, "rc": rc, "tests": {}, "import_error": None}
    if rc in (124, 137) or not os.path.exists(xml):
        with open(log) as f:
            tail = f.read().splitlines()[-3:]
        result["import_error"] = (f"timed out after {args.timeout}s" if rc in (124, 137)
                                  else "no report: " + " | ".join(tail))
        result["stopped"] = True
        return result
    result["tests"], result["import_error"] = read_junit(xml, test_file)
    return result


def cmd_run(args):
    os.makedirs(args.out, exist_ok=True)
    results_path = os.path.join(args.out, "results.json")
    results = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            results = json.load(f)
    for s in suites(args.suite):
        for mode in args.mode:
            files = [t for t in s["tests"] if not args.file or t in args.file]
            if not args.file:   # the suite's files as listed now, none left from before
                results.setdefault(s["name"], {})[mode] = {}
            for test_file in files:
                r = run_file(s, mode, test_file, args, args.out)
                results.setdefault(s["name"], {}).setdefault(mode, {})[test_file] = r
                counts = _counts({test_file: r})
                print(f"{s['name']:8} {mode:5} {test_file:45} {_fmt(counts)}"
                      + (f"  [{r['import_error']}]" if r["import_error"] else ""),
                      flush=True)
                with open(results_path, "w") as f:
                    json.dump(results, f, indent=1, sort_keys=True)


def _counts(files):
    c = dict(files=len(files), importing=0, passed=0, failed=0, error=0, skipped=0)
    for r in files.values():
        c["importing"] += r["import_error"] is None
        for outcome, _ in r["tests"].values():
            c[outcome] += 1
    return c


def _fmt(c):
    return (f"import {c['importing']}/{c['files']}  pass {c['passed']}  fail {c['failed']}"
            f"  err {c['error']}  skip {c['skipped']}")


def classify(suite, mode, test_id, message, rules):
    for rule in rules:
        if rule["suite"] not in ("*", suite) or mode not in rule.get("modes", list(MODES)):
            continue
        if re.search(rule["test"], test_id) and re.search(rule.get("message", ""), message):
            return rule["class"], rule["why"]
    return "unclassified", ""


def cmd_table(args):
    with open(os.path.join(args.out, "results.json")) as f:
        after = json.load(f)
    for lane in args.merge or []:   # folders run side by side: their suites' modes too
        with open(os.path.join(lane, "results.json")) as f:
            for name, modes in json.load(f).items():
                for mode, files in modes.items():
                    after.setdefault(name, {}).setdefault(mode, {}).update(files)
    before = {}
    if args.before:
        with open(os.path.join(args.before, "results.json")) as f:
            before = json.load(f)
    rules = load("classified.toml").get("failure", [])
    print("| library | mode | files importing | passed | failed | errors | skipped |"
          " failures by class |")
    print("|---|---|---|---|---|---|---|---|")
    unclassified = []
    for s in suites(args.suite):
        for mode in MODES:
            if mode == "stock" and mode not in after.get(s["name"], {}) \
                    and mode in before.get(s["name"], {}):
                # plain JAX: no pmapkit in it, the same before and after
                after.setdefault(s["name"], {})[mode] = before[s["name"]][mode]
            if mode not in after.get(s["name"], {}):
                continue
            a = _counts(after[s["name"]][mode])
            b = _counts(before[s["name"]][mode]) if mode in before.get(s["name"], {}) else None
            classes = {}
            for test_file, r in after[s["name"]][mode].items():
                if r["import_error"]:
                    cls, _ = classify(s["name"], mode, test_file + "::<import>",
                                      r["import_error"], rules)
                    classes[cls] = classes.get(cls, 0) + 1
                    if cls == "unclassified":
                        unclassified.append((s["name"], mode, test_file, r["import_error"]))
                for test_id, (outcome, message) in r["tests"].items():
                    if outcome in ("failed", "error"):
                        cls, _ = classify(s["name"], mode, test_id, message, rules)
                        classes[cls] = classes.get(cls, 0) + 1
                        if cls == "unclassified":
                            unclassified.append((s["name"], mode, test_id, message))

            def cell(key):
                return f"{b[key]} → {a[key]}" if b else f"{a[key]}"
            importing = (f"{b['importing']} → {a['importing']}/{a['files']}" if b
                         else f"{a['importing']}/{a['files']}")
            by_class = ", ".join(f"{k} {v}" for k, v in sorted(classes.items())) or "—"
            print(f"| {s['name']} | {mode} | {importing} | {cell('passed')} | {cell('failed')}"
                  f" | {cell('error')} | {cell('skipped')} | {by_class} |")
    if unclassified and args.list:
        print("\nunclassified:")
        for row in unclassified:
            print("  " + " | ".join(row))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["venv", "build", "run", "table"])
    parser.add_argument("--suite", action="append")
    parser.add_argument("--mode", action="append", choices=list(MODES))
    parser.add_argument("--file", action="append", help="one test file of the suite")
    parser.add_argument("--cache", default="/work/cache/suites")
    parser.add_argument("--mirror", default="/work/.mirror")
    parser.add_argument("--venv", default="/work/cache/suites-venv")
    parser.add_argument("--out", default="/work/cache/suites-results/latest")
    parser.add_argument("--before", help="results folder of the baseline, for the table")
    parser.add_argument("--merge", action="append",
                        help="table: another results folder (runs made side by side)")
    parser.add_argument("--pmapkit-src", help="a pmapkit tree put first on PYTHONPATH (the"
                        " baseline: `git archive COMMIT` of main, its built extensions copied in)")
    parser.add_argument("--extra-path", action="append",
                        help="a folder appended to the tests' PYTHONPATH")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per test file")
    parser.add_argument("--list", action="store_true", help="table: list unclassified failures")
    args = parser.parse_args(argv)
    args.mode = args.mode or list(MODES)
    {"venv": cmd_venv, "build": cmd_build, "run": cmd_run, "table": cmd_table}[args.command](args)


if __name__ == "__main__":
    main()
