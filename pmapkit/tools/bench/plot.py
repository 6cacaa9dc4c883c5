"""``pmapkit bench --plot PATH``: the ratios as a PNG, 1600 px wide.

One horizontal row per case, grouped by pattern under its title (the
patterns in the summary's order), the cases of a pattern sorted by ratio;
a bar per JAX baseline (jax.pmap, jax.jit, or a feature's own) drawn from
the line at 1.0 to the ratio, its value written at its end, on a log scale:
a bar to the left is a case where pmapkit costs less than JAX.
"""
from __future__ import annotations

from pmapkit.tools.bench import report

WIDTH_PX = 1600
DPI = 100
ROW_IN = 0.28     # inches per case row (and per pattern title)
COLORS = {"jax.pmap": "tab:blue", "jax.jit": "tab:orange", report.OTHER_JAX: "tab:green"}


def import_pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None if not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def layout(ratio_list):
    """The plot's rows, top to bottom: ``("title", pattern title)`` then, per
    case of that pattern sorted by its first ratio, ``("case", label,
    {column: ratio})``."""
    columns = list(report.SUMMARY_BASELINES) + [report.OTHER_JAX]
    patterns = {}
    for r in ratio_list:
        cases = patterns.setdefault(r["pattern"], {})
        entry = cases.setdefault(r["case"], {"subject": r["subject"], "bars": {}})
        column = r["baseline"] if r["baseline"] in report.SUMMARY_BASELINES \
            else report.OTHER_JAX
        entry["bars"][column] = (r["ratio"], r["baseline"])
    rows = []
    for pattern, cases in patterns.items():
        rows.append(("title", report.pattern_title(pattern)))
        ordered = sorted(cases.items(), key=lambda kv: next(
            kv[1]["bars"][c][0] for c in columns if c in kv[1]["bars"]))
        for case, entry in ordered:
            label = case if entry["subject"] == "pmapkit" else f"{case} [{entry['subject']}]"
            rows.append(("case", label, entry["bars"]))
    return rows


def write_plot(path, ratio_list, plt):
    """Draw ``ratio_list`` (``report.ratio_rows``) to the PNG ``path``."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, NullLocator

    rows = layout(ratio_list)
    columns = [c for c in list(report.SUMMARY_BASELINES) + [report.OTHER_JAX]
               if any(row[0] == "case" and c in row[2] for row in rows)]
    height_in = 1.6 + ROW_IN * len(rows)
    fig, ax = plt.subplots(figsize=(WIDTH_PX / DPI, height_in), dpi=DPI)
    bar_h = 0.8 / max(1, len(columns))
    labels, values = [], []
    for y, row in enumerate(rows):
        if row[0] == "title":
            labels.append(row[1])
            if y:
                ax.axhline(y - 0.5, color="0.6", linewidth=0.8)
            continue
        labels.append(row[1])
        for k, column in enumerate(columns):
            if column not in row[2]:
                continue
            ratio, baseline = row[2][column]
            yy = y - 0.4 + bar_h * (k + 0.5)
            ax.barh(yy, ratio - 1.0, bar_h, left=1.0, color=COLORS[column])
            text = f"{ratio:.2f}x" + ("" if column != report.OTHER_JAX else f" {baseline}")
            if ratio < 1:
                ax.text(ratio / 1.02, yy, text, va="center", ha="right", fontsize=7)
            else:
                ax.text(ratio * 1.02, yy, text, va="center", ha="left", fontsize=7)
            values.append(ratio)
    ax.set_xscale("log")
    # Room for the values written beyond the bars' ends.
    low = min(values + [0.5]) / 3.0
    high = max(values + [2.0]) * 3.0
    ax.set_xlim(low, high)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10,
                         20, 50, 100) if low <= t <= high]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.axvline(1.0, color="black", linewidth=1.2, linestyle="--")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    for tick, row in zip(ax.get_yticklabels(), rows):
        if row[0] == "title":
            tick.set_fontweight("bold")
            tick.set_fontsize(9)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.tick_params(axis="x", labeltop=True, top=True)
    ax.grid(axis="x", alpha=0.3)
    names = {"jax.pmap": "vs jax.pmap", "jax.jit": "vs jax.jit",
             report.OTHER_JAX: "vs the feature's own JAX baseline (named)"}
    ax.legend(handles=[Patch(color=COLORS[c], label=names[c]) for c in columns],
              loc="upper left", fontsize=9)
    ax.set_xlabel("pmapkit's cost over JAX's (log scale; left of the dashed line at "
                  "1.0x pmapkit is cheaper)")
    ax.set_title("pmapkit bench: the ratio per case, grouped by pattern, sorted "
                 "(caller-thread CPU per call; first calls: wall)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
