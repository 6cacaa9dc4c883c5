"""What ``pmapkit bench`` prints: the dispatch table, its notes and footers,
and the closing summary (one line per pattern: pmapkit's cost over
``jax.pmap``'s and ``jax.jit``'s).

Everything fits ``WIDTH`` columns unless asked ``wide``: the table then
keeps every ratio column and unrounded numbers, and long lines stay whole.
The summary's and the plot's ratios come from ``ratio_rows``: one row per
case and JAX baseline, each a cost ratio (a higher-is-better feature's
ratio is inverted), so below 1 always means pmapkit is cheaper.
"""
from __future__ import annotations

import math
import textwrap

WIDTH = 100

#: The ratio columns of the wide table (the default table keeps the first two).
RATIOS = (("pmapkit", "jax.pmap"), ("pmapkit", "jax.jit"), ("pmapkit", "raw"))

#: Readable names of the dispatch cases' families and of the feature modules
#: (``features_<name>``); any other is shown as it is named.
PATTERN_TITLES = {
    "pmap": "pmap cached call (JAX api_benchmark)",
    "first_call": "first call, trace to run [wall]",
    "pjit": "pjit cached call (JAX api_benchmark)",
    "pmap_input": "pmap fed arrays of other origins",
    "pmap_input_moved": "pmap fed arrays it must move",
    "pmap_aot": "pmap AOT-compiled call",
    "pmap_out_axes_none": "pmap with out_axes=None",
    "pmap_scalar_arg": "pmap fed a Python scalar",
    "pjit_form": "pjit call forms (kwargs, statics…)",
    "train_loop": "training-loop step",
    "pmap_fresh": "pmap wrapper built per call",
    "pjit_fresh": "pjit wrapper built per call",
    "grad_inside": "pmap built inside a loss under grad",
    "feature:fidelity": "pmap fidelity cases",
    "feature:nested": "nested pmap",
    "feature:host_callback": "host_callback taps and calls",
    "feature:export": "export",
    "feature:startup": "import pmapkit",
    "feature:colocated": "colocated_python",
    "feature:debugging": "debug_nans on and off",
    "feature:multiprocess": "several processes",
    "feature:wrappers": "pmaps built inline (script, process CPU)",
    "feature:edges": "edges: failing calls, donation",
    "feature:migrate": "migrate: script and per-call cases",
    "feature:legacy": "classic names (pmapkit run)",
}

#: The summary's columns: a baseline named here has its own; the others
#: (jax.export, jax.debug.callback, ...) share the last.
SUMMARY_BASELINES = ("jax.pmap", "jax.jit")
OTHER_JAX = "other JAX API"


def by_case(rows):
    """``{case: {impl: row}}`` in the order the rows came."""
    out = {}
    for r in rows:
        out.setdefault(r["case"], {})[r["impl"]] = r
    return out


def is_wall(impl_rows):
    return any(r["mode"] == "first_call" for r in impl_rows.values())


def shown(row):
    # The first-call row is about latency: wall time, as JAX reports it.
    return row["wall_us"] if row["mode"] == "first_call" else row["cpu_us"]


def ratios(rows):
    """``{case: {"pmapkit/jax.pmap": {"cpu": r, "wall": r}, ...}}``."""
    out = {}
    for case, impls in by_case(rows).items():
        entry = {}
        for a, b in RATIOS:
            if a in impls and b in impls:
                entry[f"{a}/{b}"] = {
                    "cpu": impls[a]["cpu_us"] / impls[b]["cpu_us"],
                    "wall": impls[a]["wall_us"] / impls[b]["wall_us"]}
        out[case] = entry
    return out


def _number(value, width):
    """``value`` in ``width`` characters, as precise as they allow with a
    space before it (a first call's wall µs, 156543.54, would otherwise
    touch the cell before)."""
    for digits in (2, 1, 0):
        text = f"{value:.{digits}f}"
        if len(text) < width:
            return text.rjust(width)
    return f"{value:.3g}".rjust(width)


def format_table(rows, case_ratios, impls, wide=False):
    """The dispatch table, then the cases' notes (each marked ``(n)`` after
    its case). Within ``WIDTH`` columns unless ``wide``: the default keeps
    the ratios to jax.pmap and jax.jit (``÷jax.pmap``: pmapkit's µs over
    jax.pmap's), and a case name too long for its column sits on a line of
    its own above its numbers."""
    cases = by_case(rows)
    notes = {}
    for c, v in cases.items():
        note = next(iter(v.values())).get("note")
        if note:
            notes[c] = (len(notes) + 1, note)
    label = {c: c + (" [wall]" if is_wall(v) else "")
             + (f" ({notes[c][0]})" if c in notes else "") for c, v in cases.items()}
    names = [f"{a}/{b}" for a, b in RATIOS if a in impls and b in impls]
    if wide:
        value_w, ratio_w, heads = 11, 18, names
    else:
        value_w, ratio_w = 9, 10
        names = [n for n in names if n != "pmapkit/raw"]
        heads = ["÷" + n.partition("/")[2] for n in names]
    numbers_w = value_w * len(impls) + ratio_w * len(names)
    label_w = max([len("case")] + [len(s) for s in label.values()])
    if not wide:
        label_w = min(label_w, WIDTH - numbers_w)
    head = (f"{'case':<{label_w}}" + "".join(f"{i:>{value_w}}" for i in impls)
            + "".join(f"{h:>{ratio_w}}" for h in heads))
    lines = [head, "-" * len(head)]
    for case, impl_rows in cases.items():
        cells = []
        for impl in impls:
            r = impl_rows.get(impl)
            if r is None:
                cells.append(f"{'-':>{value_w}}")
            elif wide:   # every digit, and a space before them however many
                cells.append(" " + f"{shown(r):.2f}".rjust(value_w - 1))
            else:
                cells.append(_number(shown(r), value_w))
        key = "wall" if is_wall(impl_rows) else "cpu"
        for n in names:
            rr = case_ratios.get(case, {}).get(n)
            if rr is None:
                cells.append(f"{'-':>{ratio_w}}")
            else:
                cells.append(f"{rr[key]:>{ratio_w}.2f}" if wide
                             else f"{rr[key]:.2f}x".rjust(ratio_w))
        if len(label[case]) > label_w:
            lines.append(label[case])
            lines.append(" " * label_w + "".join(cells))
        else:
            lines.append(f"{label[case]:<{label_w}}" + "".join(cells))
    if not wide and names:
        lines.append(wrap(f"{', '.join(heads)}: pmapkit's time over that impl's "
                          "(below 1.00x pmapkit is cheaper); --wide adds pmapkit/raw."))
    for case, (n, note) in notes.items():
        lines.append(wrap(f"({n}) {case}: {note}", wide, indent="    "))
    return "\n".join(lines)


def wrap(text, wide=False, indent=""):
    """``text`` folded to ``WIDTH`` columns (as it is when ``wide``)."""
    if wide:
        return text
    return textwrap.fill(text, WIDTH, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def skipped_lines(skipped, impls_of):
    """'not run (reason): what' lines; a case whose every impl was skipped
    for one reason is named once, otherwise 'case[impl]'. ``impls_of(case)``
    gives a case's impls."""
    by_reason = {}
    for s in skipped:
        by_reason.setdefault(s["reason"], {}).setdefault(s["case"], []).append(s["impl"])
    lines = []
    for reason, cases in by_reason.items():
        names = []
        for case, impls in cases.items():
            if set(impls) == set(impls_of(case)):
                names.append(case)
            else:
                names += [f"{case}[{i}]" for i in impls]
        lines.append(f"not run ({reason}): {', '.join(names)}")
    return lines


# -- ratios per case and pattern --------------------------------------------------
def ratio_rows(rows, feature_results, features):
    """One row per (case, JAX baseline) with a measured ratio, in run order:
    ``{"case", "pattern", "baseline", "subject", "ratio"}``, the ratio being
    the subject's cost over the baseline's (below 1: the subject is
    cheaper). Dispatch cases give one row against jax.pmap and one against
    jax.jit where they ran both; feature cases one against their baseline."""
    out = []
    case_ratios = ratios(rows)
    for case, impl_rows in by_case(rows).items():
        family = next(iter(impl_rows.values()))["family"]
        key = "wall" if is_wall(impl_rows) else "cpu"
        for baseline in SUMMARY_BASELINES:
            rr = case_ratios.get(case, {}).get(f"pmapkit/{baseline}")
            if rr is not None:
                out.append({"case": case, "pattern": family, "baseline": baseline,
                            "subject": "pmapkit", "ratio": rr[key]})
    for case, frows in feature_results:
        r = features.ratio(case, frows)
        if r is None or r <= 0:
            continue
        module = case.run.__module__.rpartition(".")[2]
        out.append({"case": case.name,
                    "pattern": "feature:" + module.removeprefix("features_"),
                    "baseline": case.baseline,
                    "subject": features.subject_impl(case, frows),
                    "ratio": 1 / r if case.higher_is_better else r})
    return out


def pattern_title(pattern):
    return PATTERN_TITLES.get(pattern, pattern.removeprefix("feature:"))


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(ratio_list):
    """Per pattern, in first-seen order: ``{"pattern", "title", "cases",
    "subjects", "columns": {column: {"geomean", "low", "high", "cases",
    "baselines"}}}``, a column being jax.pmap, jax.jit or ``OTHER_JAX``."""
    patterns = {}
    for r in ratio_list:
        p = patterns.setdefault(r["pattern"], {"pattern": r["pattern"],
                                               "title": pattern_title(r["pattern"]),
                                               "cases": [], "subjects": [],
                                               "columns": {}})
        if r["case"] not in p["cases"]:
            p["cases"].append(r["case"])
        if r["subject"] not in p["subjects"]:
            p["subjects"].append(r["subject"])
        column = r["baseline"] if r["baseline"] in SUMMARY_BASELINES else OTHER_JAX
        c = p["columns"].setdefault(column, {"values": [], "baselines": []})
        c["values"].append(r["ratio"])
        if r["baseline"] not in c["baselines"]:
            c["baselines"].append(r["baseline"])
    out = []
    for p in patterns.values():
        columns = {}
        for name, c in p["columns"].items():
            columns[name] = {"geomean": geomean(c["values"]), "low": min(c["values"]),
                             "high": max(c["values"]), "cases": len(c["values"]),
                             "baselines": c["baselines"]}
        out.append(dict(p, cases=len(p["cases"]), columns=columns))
    return out


def _cell(column):
    if column is None:
        return "-"
    if column["cases"] == 1:
        return f"{column['geomean']:.2f}x"
    return f"{column['geomean']:.2f}x ({column['low']:.2f}-{column['high']:.2f})"


def format_summary(summary):
    """The closing summary: one line per pattern, within ``WIDTH`` columns."""
    if not summary:
        return ""
    columns = list(SUMMARY_BASELINES) + [OTHER_JAX]
    title_w = min(36, max(len("pattern"), *(len(p["title"]) for p in summary)))
    cell_w = 19
    lines = [wrap("summary: pmapkit's cost over JAX's, per pattern: the geometric "
                  "mean of its cases' ratios (lowest-highest); below 1.00x pmapkit "
                  "is cheaper. Feature cases' ratios are against their own JAX "
                  "baseline (rates inverted to costs)."),
             f"{'pattern':<{title_w}}{'cases':>6}  "
             + "".join(f"{'vs ' + c:<{cell_w}}" for c in columns).rstrip()]
    others = []
    for p in summary:
        title = p["title"] if len(p["title"]) <= title_w else p["title"][:title_w - 1] + "…"
        cells = "".join(f"{_cell(p['columns'].get(c)):<{cell_w}}" for c in columns)
        lines.append(f"{title:<{title_w}}{p['cases']:>6}  {cells}".rstrip())
        if p["subjects"] != ["pmapkit"]:
            others.append(f"{p['title']}: {', '.join(p['subjects'])}")
    baselines = []
    for p in summary:
        for b in p["columns"].get(OTHER_JAX, {}).get("baselines", []):
            if b not in baselines:
                baselines.append(b)
    if baselines:
        lines.append(wrap(f"vs {OTHER_JAX}: {', '.join(baselines)}"))
    if others:
        lines.append(wrap("what these patterns compare with JAX (not pmapkit alone): "
                          + "; ".join(others)))
    return "\n".join(lines)
