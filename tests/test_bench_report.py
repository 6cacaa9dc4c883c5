"""What ``pmapkit bench`` and ``pmapkit run --report`` print: within 100
columns by default (``--wide`` / ``--report=wide`` for the rest), a closing
summary per pattern, rows named by what ran, a ``--quick`` case set that
covers every pattern. Formatting is checked on made-up measurements (fast);
one short real run checks the command end to end."""
import json
import os
import subprocess
import sys

import pytest

from pmapkit.legacy import report as legacy_report
from pmapkit.tools.bench import engine, features, plot, report

WIDTH = 100
LONG_CASE = "pmap_input_committed_other_device_of_a_very_long_name_8_devices"


def _row(case, impl, us, family="pmap", mode="dispatch", note=None):
    return {"case": case, "impl": impl, "family": family, "mode": mode, "devices": 8,
            "note": note, "cpu_us": us, "wall_us": us * 1.5}


def _rows():
    rows = []
    for impl, us in (("jax.pmap", 12.0), ("jax.jit", 6.0), ("pmapkit", 6.2), ("raw", 5.5)):
        rows.append(_row("pmap_trivial_1_devices", impl, us))
        rows.append(_row(LONG_CASE, impl, us * 40, family="pmap_input_moved",
                         note="raw (the floor) is fed the same values already placed "
                              "on the 8 devices, so it moves nothing at all: " * 3))
    for impl, us in (("jax.pmap", 104362.36), ("jax.jit", 80747.61), ("pmapkit", 89551.5)):
        rows.append(_row("pmap_first_call_8_devices", impl, us, family="first_call",
                         mode="first_call"))
    for impl, us in (("jax.jit", 6.4), ("pmapkit", 6.6), ("raw", 5.8)):
        rows.append(_row("pjit_simple_1_device", impl, us, family="pjit"))
    return rows


def _feature(name, baseline, rows, higher_is_better=False, module="features_migrate"):
    def run(settings):
        return rows
    run.__module__ = f"pmapkit.tools.bench.{module}"
    return features.FeatureCase(name, run, baseline, higher_is_better), rows


def _feature_results():
    return [
        _feature("migrate_inline_pmaps_script_8_devices", "jax.pmap", [
            {"impl": "jax.pmap", "value": 56175.3, "unit": "us/iteration (wall)"},
            {"impl": "pmapkit run --route-pmap", "value": 7756.7,
             "unit": "us/iteration (wall)"},
            {"impl": "migrated file on plain jax (no pmapkit at all, jit of shard_map)",
             "value": 548.4, "unit": "us/iteration (wall)"}]),
        _feature("host_callback_id_tap_taps_per_s", "jax.debug.callback", [
            {"impl": "pmapkit", "value": 127195.8, "unit": "taps/s"},
            {"impl": "jax.debug.callback", "value": 6952.9, "unit": "taps/s"}],
            higher_is_better=True, module="features_host_callback"),
    ]


def _widest(text):
    return max(len(line) for line in text.splitlines())


def test_the_table_fits_100_columns_and_wide_keeps_everything():
    rows = _rows()
    impls = ["jax.pmap", "jax.jit", "pmapkit", "raw"]
    text = report.format_table(rows, report.ratios(rows), impls)
    assert _widest(text) <= WIDTH, text
    lines = text.splitlines()
    assert lines[0].split() == ["case", *impls, "÷jax.pmap", "÷jax.jit"]
    # A name too long for its column keeps its own line, never cut.
    at = lines.index(f"{LONG_CASE} (1)")
    assert lines[at + 1].split()[-2:] == ["0.52x", "1.03x"]
    assert "pmap_trivial_1_devices " in text and "0.52x" in text
    assert any(line.startswith("pmap_first_call_8_devices [wall]") for line in lines)
    wide = report.format_table(rows, report.ratios(rows), impls, wide=True)
    assert "pmapkit/raw" in wide.splitlines()[0]
    assert _widest(wide) > WIDTH   # the note and the long name, whole
    assert "156543.54" in wide   # first calls show wall time: 1.5 x 104362.36


@pytest.mark.parametrize("wide", [False, True])
def test_numbers_never_run_together(wide):
    # A first call's wall µs (six digits before the point) keeps a space
    # before it, as every other number does.
    rows = _rows()
    for impl, us in (("jax.pmap", 1.5e7), ("jax.jit", 99999999.0), ("pmapkit", 123456789.0)):
        rows.append(_row("pmap_first_call_huge", impl, us, family="first_call", mode="first_call"))
    impls = ["jax.pmap", "jax.jit", "pmapkit", "raw"]
    text = report.format_table(rows, report.ratios(rows), impls, wide=wide)
    columns = len(text.splitlines()[0].split()) - 1
    for case in ("pmap_first_call_8_devices [wall]", "pmap_first_call_huge [wall]",
                 "pmap_trivial_1_devices"):
        line = next(line for line in text.splitlines() if line.startswith(case))
        cells = line[len(case):].split()
        assert len(cells) == columns, line
        assert all(c == "-" or float(c.rstrip("x")) > 0 for c in cells), line
    first = next(line for line in text.splitlines() if line.startswith("pmap_first_call_8"))
    assert first[len("pmap_first_call_8_devices [wall]"):].split()[:3] == (
        ["156543.54", "121121.42", "134327.25"] if wide else ["156543.5", "121121.4", "134327.2"])


def test_feature_rows_name_what_ran_and_fit():
    results = _feature_results()
    text = features.format_table(results)
    assert _widest(text) <= WIDTH, text
    # No row named pmapkit: the ratio is the last non-baseline row's, on it.
    case, rows = results[0]
    assert features.subject_impl(case, rows) == rows[2]["impl"]
    migrated = next(line for line in text.splitlines() if "548.400" in line)
    assert migrated.startswith("  migrated file on plain jax")
    assert migrated.endswith("0.01x jax.pmap")
    assert "0.01x" not in next(line for line in text.splitlines() if "7756.700" in line)
    assert "µs/iteration (wall)" in migrated   # one spelling of the unit: µs, CPU
    assert features.shown_unit("us/call cpu") == features.shown_unit("µs/call CPU")
    assert "migrated file on plain jax (no pmapkit at all, jit of shard_map)" in \
        features.format_table(results, wide=True)


def test_the_summary_has_one_line_per_pattern_within_100_columns():
    rows = _rows()
    ratio_list = report.ratio_rows(rows, _feature_results(), features)
    summary = report.summarize(ratio_list)
    assert [p["pattern"] for p in summary] == [
        "pmap", "pmap_input_moved", "first_call", "pjit", "feature:migrate",
        "feature:host_callback"]
    text = report.format_summary(summary)
    assert _widest(text) <= WIDTH, text
    lines = text.splitlines()
    by_title = {line[:36].strip(): line[36:].split() for line in lines
                if line[:36].strip() in {p["title"] for p in summary}}
    assert by_title["pmap cached call (JAX api_benchmark)"] == ["1", "0.52x", "1.03x", "-"]
    assert by_title["pjit cached call (JAX api_benchmark)"] == ["1", "-", "1.03x", "-"]
    # A rate (higher is better) becomes a cost: 6952.9 / 127195.8.
    assert by_title["host_callback taps and calls"] == ["1", "-", "-", "0.05x"]
    # The first call is wall time: 89551.5 / 104362.36.
    assert by_title["first call, trace to run [wall]"][1] == "0.86x"
    # The migrate pattern compares a migrated file, not pmapkit: said so.
    said = " ".join(lines[next(k for k, line in enumerate(lines)
                              if line.startswith("what these patterns compare")):])
    assert "migrate: script and per-call cases: migrated file on plain jax" in said


def test_the_plot_groups_by_pattern_and_sorts_by_ratio():
    rows = [_row(c, i, us) for c, pmap_us in (("a_case", 10.0), ("b_case", 4.0),
                                               ("c_case", 20.0))
            for i, us in (("jax.pmap", pmap_us), ("jax.jit", 5.0), ("pmapkit", 5.0))]
    rows += [_row("p_case", i, us, family="pjit") for i, us in (("jax.jit", 2.0),
                                                               ("pmapkit", 3.0))]
    layout = plot.layout(report.ratio_rows(rows, [], features))
    assert [r[0] for r in layout] == ["title", "case", "case", "case", "title", "case"]
    assert [r[1] for r in layout] == [report.pattern_title("pmap"), "c_case", "a_case",
                                      "b_case", report.pattern_title("pjit"), "p_case"]
    assert layout[1][2]["jax.pmap"][0] == pytest.approx(0.25)


def test_quick_cases_exist_and_cover_every_family():
    cases = engine.load_cases()
    names = {c.name for c in cases}
    assert engine.QUICK_CASES <= names, engine.QUICK_CASES - names
    families = {c.family for c in cases}
    quick = {c.family for c in cases if c.name in engine.QUICK_CASES}
    assert quick == families, families - quick
    assert len(engine.QUICK_CASES) < len(cases)


def test_run_report_fits_100_columns_and_wide_is_one_line_per_name():
    entry = {"name": "jax.experimental.pjit.pjit", "removed_in": "0.4.31", "uses": 3,
             "how": "calls",
             "first_use": "/a/very/long/path/" + "deeply/nested/" * 8 + "train.py:12",
             "served_by": "pmapkit.pjit", "modern": "jax.jit with in_shardings/"
             "out_shardings: in_axis_resources -> in_shardings, out_axis_resources -> "
             "out_shardings, a PartitionSpec becomes NamedSharding(mesh, spec)",
             "example": "jax.jit(f, in_shardings=NamedSharding(mesh, P('x')))"}
    text = legacy_report.format_entries([entry, dict(entry, name="jax.tree_map")])
    assert _widest(text) <= WIDTH, text
    lines = text.splitlines()
    assert lines[0].startswith("pmapkit.legacy report: 2 classic name(s) used")
    assert lines[1] == "jax.experimental.pjit.pjit (removed in 0.4.31)"
    assert lines[2] == "    uses        3 calls"
    # Folded, nothing lost.
    assert lines[3][:16] == "    first use   " and lines[4][:16] == " " * 16
    assert lines[3][16:] + lines[4][16:] == entry["first_use"]
    assert entry["modern"] in " ".join(text.split())
    wide = legacy_report.format_entries([entry], wide=True).splitlines()
    assert len(wide) == 4 and entry["first_use"] in wide[3] and entry["modern"] in wide[3]


def test_bench_runs_end_to_end_with_its_summary_last(tmp_path):
    """One short real run: the table, the summary at the end, all within
    100 columns; the JSON carries the summary."""
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "pmapkit", "bench", "--cases",
                           "pmap_trivial_dispatch_1", "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[0].split()[0] == "case"
    assert any(line.startswith("pmap_trivial_dispatch_1_devices ") for line in lines)
    summary_at = next(k for k, line in enumerate(lines) if line.startswith("summary:"))
    title = report.pattern_title("pmap")
    assert lines[-1].startswith(title), lines[summary_at:]
    doc = json.loads(out.read_text())
    assert [p["pattern"] for p in doc["summary"]] == ["pmap"]
    assert set(doc["summary"][0]["columns"]) == {"jax.pmap", "jax.jit"}
