"""Writes the census tables of docs/classic-names.md from what
``python -m pmapkit.legacy.census_check --json`` says on this JAX: the
counts per release (between the ``releases`` markers; the plain errors of
plain JAX from ``--no-install``), and the census-of-real-use section
(between the ``real-use`` markers): every name two or more public
repositories reach that JAX 0.10.2 lacks, with the repositories reaching it
and what serves it (or why it is refused), and the counts over every name,
those one repository reaches too; and the table of JAX internals refused
(between the ``internals`` markers), by module, from the census records.

    python docs/_tools/census_tables.py          # rewrite the sections
    python docs/_tools/census_tables.py --check  # exit 1 if one is stale
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(os.path.dirname(HERE), "classic-names.md")
BEGIN, END = "<!-- real-use:begin -->", "<!-- real-use:end -->"
RELEASES_BEGIN, RELEASES_END = "<!-- releases:begin -->", "<!-- releases:end -->"
INTERNALS_BEGIN, INTERNALS_END = "<!-- internals:begin -->", "<!-- internals:end -->"
#: The internals table lists the names removed from this release on: those
#: whose removal the census probed release by release (0.4.13 to 0.10.2).
INTERNALS_FROM = (0, 4, 14)
SHOWN = 6


def _held(*options):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PMAPKIT_REPORT", None)
    proc = subprocess.run([sys.executable, "-P", "-m", "pmapkit.legacy.census_check", "--json",
                           *options], capture_output=True, text=True, timeout=900, env=env,
                          check=True)
    return json.loads(proc.stdout)


def releases_section(held, plain_jax):
    """The counts per release, and over their union."""
    lines = [RELEASES_BEGIN, "",
             "| release | pairs | exists natively | served by pmapkit | clear error "
             "| plain error (plain JAX → pmapkit) |",
             "| --- | --- | --- | --- | --- | --- |"]
    union = dict.fromkeys(("native", "served", "clear", "plain"), 0)
    union_before = 0
    for release, tally in held["releases"].items():
        before = plain_jax["releases"][release]["plain"]
        lines.append(f"| {release} | {sum(tally.values())} | {tally['native']} | "
                     f"{tally['served']} | {tally['clear']} | {before} → "
                     f"**{tally['plain']}** |")
    for name, (outcome, _) in held["names"].items():
        union[outcome] += 1
        union_before += plain_jax["names"].get(name, ["native"])[0] == "plain"
    from pmapkit.legacy import census
    union["native"] = len(census.union()) - len(held["names"])
    lines.append(f"| union | {len(census.union())} | {union['native']} | {union['served']} | "
                 f"{union['clear']} | {union_before} → **{union['plain']}** |")
    lines += ["", RELEASES_END]
    return "\n".join(lines)


def _release_key(window):
    """``0.4.14..0.4.18``, ``0.10.0``, ``0.10.0 at the latest``: the last
    release the window names, as numbers."""
    last = window.split(" ")[0].split("..")[-1]
    return tuple(int(part) for part in last.split("."))


def internals_section(held):
    """The census names refused as JAX internals (no public replacement),
    removed from ``INTERNALS_FROM`` on, by the module that held them."""
    from pmapkit.legacy import names
    by_module = {}
    for record in names.census_records().values():
        if (record.make is None and record.modern == names.INTERNAL
                and held["names"].get(record.name, ["native"])[0] == "clear"
                and _release_key(str(record.removed_in)) >= INTERNALS_FROM):
            by_module.setdefault(record.owner, []).append(record)
    total = sum(len(records) for records in by_module.values())
    lines = [INTERNALS_BEGIN, "",
             f"{total} names of {len(by_module)} modules whose removal window ends at JAX "
             f"{'.'.join(map(str, INTERNALS_FROM))} or later (the releases the census probed "
             "one by one), each refused with its removal release:",
             "",
             "| module | names | removed in |",
             "| --- | --- | --- |"]
    for module in sorted(by_module):
        records = sorted(by_module[module], key=lambda r: r.attr)
        shown = ", ".join("{classic}`" + f"{r.attr} <{r.name}>`" for r in records[:SHOWN])
        if len(records) > SHOWN:
            shown += f", … ({len(records)} in all)"
        windows = sorted({str(r.removed_in) for r in records}, key=_release_key)
        span = windows[0] if len(windows) == 1 else f"{windows[0]} – {windows[-1]}"
        lines.append(f"| {_name_cell(module)} | {shown} | {span} |")
    lines += ["", INTERNALS_END]
    return "\n".join(lines)


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
    everything = held["real_use"]["all"]
    plain = sorted(n for n, (o, _, repos) in held["real_use_names"].items()
                   if o == "plain" and repos == 1)
    lines = [BEGIN, "",
             f"{repositories} public repositories were read, each at up to three pinned "
             f"commits ({len(sources)} in all, 2019–2024: each repository's last commit "
             "before 2020-10-01, 2022-01-01 and 2023-01-01, or before 2024-06-01 where it "
             "has none before 2023), and every `jax.*` / `jaxlib.*` "
             f"name they reach counted: {len(census.real_use())} names, {len(rows)} of "
             f"them reached by two or more repositories. Of those, {len(missing)} are "
             f"missing or changed on JAX 0.10.2: {tally['served']} are served, "
             f"{tally['clear']} refused with the reason no faithful serve exists, and "
             f"{tally['plain']} still raise{'s' if tally['plain'] == 1 else ''} a plain "
             "error (JAX's own, named in the table).",
             "",
             f"Over every name, those one repository reaches too ({len(census.real_use())}): "
             f"{everything['native']} exist natively, {everything['served']} are served, "
             f"{everything['clear']} refused with what to use, and {everything['plain']} "
             "raise a plain error: the call `x.device()` (in the table below) and these, "
             "each reached by one repository: " + ", ".join(_name_cell(n) for n in plain) +
             ". Each is no name of any release the census reads (a typo such as `jax.random.splt`, a fork's jaxlib function, an "
             "attribute of an object rather than a module) or an internal reached through "
             "a classic stand-in module.",
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
    held = _held()
    before, _, rest = page.partition(BEGIN)
    _, _, after = rest.partition(END)
    new = before + section(held) + after
    before, _, rest = new.partition(RELEASES_BEGIN)
    _, _, after = rest.partition(RELEASES_END)
    new = before + releases_section(held, _held("--no-install")) + after
    before, _, rest = new.partition(INTERNALS_BEGIN)
    _, _, after = rest.partition(INTERNALS_END)
    new = before + internals_section(held) + after
    if "--check" in argv:
        if new != page:
            print("docs/classic-names.md's census tables are stale: run "
                  "python docs/_tools/census_tables.py", file=sys.stderr)
            return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
