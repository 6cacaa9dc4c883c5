"""Writes the census-of-real-use section of docs/classic-names.md (between
its ``real-use`` markers) from ``census.real_use()`` and what
``python -m pmapkit.legacy.census_check --json`` says of each name on this
JAX: every name two or more public repositories reach that JAX 0.10.2 lacks,
with the repositories reaching it and what serves it (or why it is refused).

    python docs/_tools/real_use_table.py          # rewrite the section
    python docs/_tools/real_use_table.py --check  # exit 1 if it is stale
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(os.path.dirname(HERE), "classic-names.md")
BEGIN, END = "<!-- real-use:begin -->", "<!-- real-use:end -->"


def _held():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PMAPKIT_REPORT", None)
    proc = subprocess.run([sys.executable, "-P", "-m", "pmapkit.legacy.census_check", "--json"],
                          capture_output=True, text=True, timeout=900, env=env, check=True)
    return json.loads(proc.stdout)


def _name_cell(name):
    return "{classic}`" + name + "`"


def _what(name, outcome, text):
    from pmapkit.legacy import names
    record = names.by_name(name) if names.known(name) else None
    if outcome == "served":
        return "served: " + (record.served_by if record is not None and record.served_by
                             else "the name on its served module")
    if record is not None and record.why:
        return f"refused: {record.why} (use {record.modern})"
    if outcome == "clear":
        first = text.split(" so pmapkit.legacy")[0].split(", so pmapkit.legacy")[0]
        tail = text.split("use ", 1)[1].split(" instead")[0] if "use " in text else ""
        return "refused" + (f" (use {tail})" if tail else f": {first}")
    return f"not served: {text.splitlines()[0] if text else outcome}"


def section(held):
    from pmapkit.legacy import census
    rows = census.real_use(2)
    sources = census.real_use_sources()
    repositories = len({s.repository for s in sources})
    missing = [r for r in rows if held["real_use_names"].get(r.name, ["native"])[0] != "native"]
    tally = held["real_use"]["2+ repositories"]
    lines = [BEGIN, "",
             f"{repositories} public repositories were read, each at up to three pinned "
             f"commits ({len(sources)} in all, 2019–2024: each repository's last commit "
             "before 2020-10-01, 2022-01-01 and 2023-01-01), and every `jax.*` / `jaxlib.*` "
             f"name they reach counted: {len(census.real_use())} names, {len(rows)} of "
             f"them reached by two or more repositories. Of those, {len(missing)} are "
             f"missing or changed on JAX 0.10.2: {tally['served']} are served, "
             f"{tally['clear']} refused with the reason no faithful serve exists, and "
             f"{tally['plain']} still raise{'s' if tally['plain'] == 1 else ''} a plain "
             "error (JAX's own, named in the table).",
             "",
             "| name | repositories | on JAX 0.10.2 with pmapkit.legacy |",
             "| --- | --- | --- |"]
    for r in missing:
        outcome, text, _ = held["real_use_names"][r.name]
        what = _what(r.name, outcome, text).replace("|", "\\|")
        lines.append(f"| {_name_cell(r.name)} | {r.repos} | {what} |")
    lines += ["", END]
    return "\n".join(lines)


def main(argv):
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    before, _, rest = page.partition(BEGIN)
    _, _, after = rest.partition(END)
    new = before + section(_held()) + after
    if "--check" in argv:
        if new != page:
            print("docs/classic-names.md's real-use section is stale: run "
                  "python docs/_tools/real_use_table.py", file=sys.stderr)
            return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
