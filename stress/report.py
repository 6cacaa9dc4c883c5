"""The tables of a stress pass, and its JSON."""
from __future__ import annotations

from stress.probes import OUTCOMES

SECTION_TITLES = {
    "bad_inputs": "1. Bad inputs",
    "fuzz": "2. Fuzzed export artifacts",
    "concurrency": "3. Concurrency",
    "memory": "4. Memory",
    "donation": "5. Donation",
    "selftest": "Harness self-test (each outcome must be the one its name announces)",
}


def counts(records):
    """``{group: {outcome: n}}`` and the totals, over counted (non-reference) records."""
    by_group, total = {}, dict.fromkeys(OUTCOMES, 0)
    for r in records:
        if r["reference"]:
            continue
        row = by_group.setdefault(r["group"], dict.fromkeys(OUTCOMES, 0))
        row[r["outcome"]] += 1
        total[r["outcome"]] += 1
    return by_group, total


def _calls(records):
    """Calls made by the concurrency/memory/donation probes (from their details)."""
    return sum(int(r["details"].get("calls", r["details"].get("steps", 0)) or 0)
               for r in records if isinstance(r.get("details"), dict))


def section_table(section, records):
    by_group, total = counts(records)
    shown = [o for o in OUTCOMES if total[o] or o in ("clean", "unclear", "wrong",
                                                       "crash", "hang")]
    width = max([len(g) for g in by_group] + [len("total")]) + 2
    lines = [f"{SECTION_TITLES.get(section, section)}",
             "  " + "".ljust(width) + "".join(o.rjust(9) for o in shown) + "total".rjust(9)]
    for group, row in by_group.items():
        lines.append("  " + group.ljust(width) + "".join(str(row[o]).rjust(9) for o in shown)
                     + str(sum(row.values())).rjust(9))
    lines.append("  " + "total".ljust(width) + "".join(str(total[o]).rjust(9) for o in shown)
                 + str(sum(total.values())).rjust(9))
    calls = _calls(records)
    if section in ("concurrency", "memory", "donation") and calls:
        lines.append(f"  calls made: {calls:,}")
    if section in ("concurrency", "memory", "donation"):
        lines.append("  results:")
        for r in records:
            if not r["reference"] and r["outcome"] == "clean":
                lines.append(f"    {r['name']}: {r['message']}")
    bad = [r for r in records if r["outcome"] != "clean" and not r["reference"]]
    if bad:
        lines.append("  not clean:")
        for r in bad:
            lines.append(f"    [{r['outcome']}] {r['name']}: {_one_line(r['message'])}")
    refs = [r for r in records if r["reference"]]
    if refs:
        lines.append("  for comparison, JAX itself (not counted):")
        for r in refs:
            lines.append(f"    [{r['outcome']}] {r['name']}: {_one_line(r['message'])}")
    return "\n".join(lines)


def _one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def summary_line(records):
    _, total = counts(records)
    n = sum(total.values())
    parts = ", ".join(f"{total[o]} {o}" for o in OUTCOMES if total[o])
    return f"{n} probes: {parts}"


def to_json(meta, by_section):
    sections = {}
    for section, records in by_section.items():
        by_group, total = counts(records)
        sections[section] = {
            "counts": by_group, "total": total, "calls": _calls(records),
            "not_clean": [r for r in records if r["outcome"] != "clean" and not r["reference"]],
            "reference": [r for r in records if r["reference"]],
            "probes": [_slim(r) for r in records],
        }
    return {**meta, "sections": sections}


def _slim(record):
    """Clean fuzz records keep their name and message only (thousands of them)."""
    if record["section"] == "fuzz" and record["outcome"] == "clean":
        return {"name": record["name"], "outcome": "clean", "message": record["message"]}
    return record
