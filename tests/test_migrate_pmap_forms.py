"""pmap's translation, form by form. Each form public classic code uses
(counted in ``pmapkit/tools/migrate/usage_census.json``) has a fixture here
(source in, expected source out) and runs both ways in a program of
``tests/migrate_pmap_forms/`` (``--check``: the original under ``pmapkit run
--route-pmap``, the migrated file on plain JAX; the same output). The first
program, ``values_read_at_trace.py``, is the differential suite of what a
pmapped function reads (globals, closure cells, defaults, the functions it
calls) changing between calls."""
import gc
import importlib
import json
import os
import textwrap
import threading

import jax
import numpy as np
import pytest

from pmapkit.tools.migrate import helpers, migrate_source

from _migrate_helpers import HERE, migrate, without_helpers

FORMS = os.path.join(HERE, "migrate_pmap_forms")
CENSUS = os.path.join(os.path.dirname(helpers.__file__), "usage_census.json")

# name: (source in, expected source out); each also runs in a FORMS program.
FIXTURES = {
    "call with axis_name": (
        'p_step = jax.pmap(train_step, "batch")\n',
        'p_step = _pmap(train_step, "batch")\n'),
    "call of a lambda": (
        'y = jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x)\n',
        'y = _pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x)\n'),
    "call of a partial": (
        'p = jax.pmap(functools.partial(step, model=m), axis_name="batch")\n',
        'p = _pmap(functools.partial(step, model=m), axis_name="batch")\n'),
    "call of a method": (
        'self.p_update = jax.pmap(self._update, axis_name="devices")\n',
        'self.p_update = _pmap(self._update, axis_name="devices")\n'),
    "partial decorator with donation": (
        '@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))\n'
        'def update(state, batch):\n    return state\n',
        '@functools.partial(_pmap, axis_name="i", donate_argnums=(0,))\n'
        'def update(state, batch):\n    return state\n'),
    "bare decorator": (
        "@jax.pmap\ndef double(v):\n    return v * 2\n",
        "@_pmap\ndef double(v):\n    return v * 2\n"),
    "a value": (
        "map_fn = jax.pmap if multi_device else jax.vmap\n",
        "map_fn = _pmap if multi_device else jax.vmap\n"),
    "devices": (
        'p = jax.pmap(f, axis_name="d", devices=learner_devices)\n',
        'p = _pmap(f, axis_name="d", devices=learner_devices)\n'),
    "static_broadcasted_argnums": (
        'p = jax.pmap(f, axis_name="i", static_broadcasted_argnums=(1, 2))\n',
        'p = _pmap(f, axis_name="i", static_broadcasted_argnums=(1, 2))\n'),
    "in_axes flat tuple": (
        'p = jax.pmap(f, axis_name="batch", in_axes=(0, 0, None, None))\n',
        'p = _pmap(f, axis_name="batch", in_axes=(0, 0, None, None))\n'),
    "in_axes a name": (
        "p = jax.pmap(f, in_axes=axes)\n",
        "p = _pmap(f, in_axes=axes)\n"),
    "in_axes nested tree": (
        'p = jax.pmap(f, in_axes=(0, {"scale": None, "shift": 0}))\n',
        'p = _pmap(f, in_axes=(0, {"scale": None, "shift": 0}))\n'),
    "in_axes other than 0": (
        "p = jax.pmap(f, in_axes=1)\nq = jax.pmap(f, in_axes=-1)\n",
        "p = _pmap(f, in_axes=1)\nq = _pmap(f, in_axes=-1)\n"),
    "out_axes": (
        'p = jax.pmap(f, "i", out_axes=(None, 0))\nq = jax.pmap(f, out_axes=-1)\n',
        'p = _pmap(f, "i", out_axes=(None, 0))\nq = _pmap(f, out_axes=-1)\n'),
    "a pmap of a pmap": (
        'y = jax.pmap(jax.pmap(f, axis_name="inner"), axis_name="outer")(x)\n',
        'y = _pmap(_pmap(f, axis_name="inner"), axis_name="outer")(x)\n'),
    "from jax import pmap": (
        "from jax import pmap\n\np = pmap(f)\n",
        "p = _pmap(f)\n"),
}

# Each census form seen in at least three files: the fixture above and the
# program running it.
COVERED = {
    "call sites": ("call with axis_name", "argument_forms.py"),
    "form: jax.pmap(f, ...)": ("call with axis_name", "argument_forms.py"),
    "form: @partial(jax.pmap, ...)": ("partial decorator with donation",
                                      "loops_and_collectives.py"),
    "form: @jax.pmap": ("bare decorator", "pytree_arguments.py"),
    "form: jax.pmap as a value (passed or assigned)": ("a value", "argument_forms.py"),
    "axis_name": ("call with axis_name", "loops_and_collectives.py"),
    "donate_argnums": ("partial decorator with donation", "argument_forms.py"),
    "devices": ("devices", "argument_forms.py"),
    "static_broadcasted_argnums": ("static_broadcasted_argnums", "argument_forms.py"),
    "in_axes": ("in_axes flat tuple", "argument_forms.py"),
    "in_axes form: flat tuple of 0/None": ("in_axes flat tuple", "argument_forms.py"),
    "body: lambda": ("call of a lambda", "values_read_at_trace.py"),
    "body: partial of function in the file": ("call of a partial", "argument_forms.py"),
    "body: function in the file": ("call with axis_name", "values_read_at_trace.py"),
    "body: decorated function": ("partial decorator with donation", "argument_forms.py"),
    "body: not in the file": ("call of a method", "argument_forms.py"),
    "body calls: pmean": ("partial decorator with donation", "loops_and_collectives.py"),
    "body calls: value_and_grad": ("partial decorator with donation",
                                   "loops_and_collectives.py"),
    "body calls: grad": ("partial decorator with donation", "pytree_arguments.py"),
    "body calls: all_gather": ("call with axis_name", "loops_and_collectives.py"),
    "body calls: psum": ("call of a lambda", "loops_and_collectives.py"),
    "body calls: scan": ("call with axis_name", "loops_and_collectives.py"),
    "body calls: axis_index": ("call with axis_name", "loops_and_collectives.py"),
    "pytree kind: flax TrainState": ("partial decorator with donation", "pytree_arguments.py"),
    "pytree kind: a dataclass": ("bare decorator", "pytree_arguments.py"),
    "pytree kind: flax struct dataclass": ("partial decorator with donation",
                                           "pytree_arguments.py"),
    "pytree kind: NamedTuple class": ("call of a lambda", "pytree_arguments.py"),
}


def _census():
    with open(CENSUS) as f:
        return json.load(f)


def _imports_and(body):
    return "import functools\nimport jax\nfrom jax import lax\n" + body


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_each_pmap_form_migrates_as_its_fixture_says(name):
    source, expected = FIXTURES[name]
    new, report = migrate_source(_imports_and(source))
    new = without_helpers(new)
    assert expected.strip() in new, (name, new)
    assert "jax.pmap" not in new and "import pmap" not in new, (name, new)
    assert report.left == [] and report.kept == [] and report.helpers == ["_pmap"]


def test_every_census_form_seen_in_a_few_files_has_a_fixture_and_a_program():
    census = _census()
    assert census["files with a pmap site"] >= 50 and census["forms"]["call sites"]["sites"] >= 50
    seen = {label for label, counts in census["forms"].items() if counts["files"] >= 3}
    seen |= {f"pytree kind: {kind}" for kind, files
             in census["pytree kinds (files with a pmap site using them)"].items() if files >= 3}
    assert seen - set(COVERED) == set()
    for label in seen:
        fixture, program = COVERED[label]
        assert fixture in FIXTURES
        assert os.path.exists(os.path.join(FORMS, program))


def test_the_forms_programs_print_what_the_originals_print(tmp_path):
    proc = migrate(FORMS, "-o", str(tmp_path), "--check", "--strict")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    programs = sorted(f for f in os.listdir(FORMS) if f.endswith(".py"))
    assert len(programs) == 4
    for name in programs:
        verdict = next(line for line in proc.stdout.splitlines()
                       if line.startswith(f"check {os.path.join(FORMS, name)}:"))
        assert ": same: exit status 0," in verdict, verdict
        text = (tmp_path / name).read_text()
        assert "jax.pmap" not in without_helpers(text) and "import pmapkit" not in text, name
    assert " 0 left, 0 pmap kept" in proc.stdout


def _pmap_helper():
    namespace = {name: importlib.import_module(name) for name in helpers.PMAP.imports}
    exec(compile(helpers.PMAP.source, "<_pmap>", "exec"), namespace)
    return namespace


def test_programs_are_shared_by_function_object_only_and_die_with_it():
    namespace = _pmap_helper()
    pmap, programs = namespace["_pmap"], namespace["_PMAP_WRAPPERS"]
    x = np.ones((8, 2), np.float32)
    traces = []

    def f(v):
        traces.append(v.shape)
        return v + 1
    for _ in range(3):
        pmap(f)(x)          # a wrapper made anew each time: one trace
    pmap(f, "i")(x)         # other options: another
    assert len(traces) == 2 and pmap(f).__wrapped__ is f
    # Equal code, equal globals, different captured values: never one program.
    made = [pmap(lambda v, k=k: v * k) for k in (1.0, 2.0)]
    assert [float(m(x)[0, 0]) for m in made] == [1.0, 2.0]
    assert len(programs) == 3
    del f, made
    gc.collect()
    assert programs == {}


def test_a_pmap_of_a_pmap_runs_over_a_mesh_with_an_axis_for_each():
    pmap = _pmap_helper()["_pmap"]
    x = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)

    def body(v):
        where = 10 * jax.lax.axis_index("i") + jax.lax.axis_index("j")
        return v + jax.lax.psum(v, ("i", "j")) + where.astype(v.dtype)
    out = pmap(pmap(body, "j"), "i")(x)
    np.testing.assert_allclose(out, jax.vmap(jax.vmap(body, axis_name="j"), axis_name="i")(x))
    assert out.sharding.mesh.axis_names == ("i", "j") and len(out.sharding.device_set) == 8


def test_a_pmap_called_while_another_thread_traces_a_pmap_body_is_not_nested_in_it():
    pmap = _pmap_helper()["_pmap"]
    x = np.ones((8, 2), np.float32)
    tracing, proceed, results = threading.Event(), threading.Event(), {}

    def body(v):
        tracing.set()
        proceed.wait(120)
        return v + 1

    def outer():
        results["outer"] = float(pmap(body)(x)[0, 0])
    thread = threading.Thread(target=outer)
    thread.start()
    try:
        assert tracing.wait(120)
        results["here"] = float(pmap(lambda v: v * 3)(x)[0, 0])
    finally:
        proceed.set()
        thread.join(120)
    assert results == {"outer": 2.0, "here": 3.0}


def test_bad_arguments_of_the_helper_name_themselves():
    pmap = _pmap_helper()["_pmap"]
    x = np.ones((8, 2), np.float32)
    with pytest.raises(TypeError, match="in_axes"):
        pmap(lambda v: v, in_axes="rows")
    with pytest.raises(TypeError, match="static_broadcasted_argnums"):
        pmap(lambda v, n: v, static_broadcasted_argnums=(-1,))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        pmap(lambda a, b: a + b)(x, x[:4])
    with pytest.raises(ValueError, match="in_axes"):
        pmap(lambda a, b: a, in_axes=(0, None, 0))(x, x)
    with pytest.raises(ValueError, match="devices"):
        pmap(lambda v: v, devices=jax.devices()[:2])(x)


def test_the_census_counts_public_programs_not_ours():
    census = _census()
    names = [r["repository"] for r in census["repositories"]]
    assert len(names) >= 10 and not any("pmapkit" in n or n == "jax-ml/jax" for n in names)
    assert all(len(r["commit"]) == 40 for r in census["repositories"])
    assert textwrap.dedent(census["how"]).startswith("How public classic code calls")


def test_the_census_counter_reads_each_spelling_of_pmap():
    from pmapkit.tools.migrate import usage_census
    sites, kinds = usage_census.sites_of(textwrap.dedent('''\
        import functools
        from typing import NamedTuple
        import jax as jx
        from jax import pmap as pm, lax

        class Batch(NamedTuple):
            x: int

        @functools.partial(jx.pmap, axis_name="i", donate_argnums=(0,))
        def step(s, b):
            return lax.pmean(jx.value_and_grad(f)(s, b), "i")

        def body(v):
            return lax.fori_loop(0, 3, lambda i, c: c + v, 0.0)

        a = pm(body, "i", in_axes=(0, None), static_broadcasted_argnums=1)
        b = jx.pmap(lambda v: lax.psum(v, "i"), "i", devices=ds, out_axes=None)
        c = jx.api.pmap(self.update)
        mapper = jx.pmap
        '''))
    assert kinds == {"NamedTuple class"}
    by_form = {site["form"]: site for site in sites}
    assert sorted(by_form) == ["@partial(jax.pmap, ...)", "jax.pmap as a value (passed or assigned)",
                               "jax.pmap(f, ...)"]
    assert by_form["@partial(jax.pmap, ...)"] == {
        "form": "@partial(jax.pmap, ...)", "axis_name": True, "donate_argnums": True,
        "body": "decorated function", "body calls": ["pmean", "value_and_grad"]}
    calls = [s for s in sites if s["form"] == "jax.pmap(f, ...)"]
    assert [s.get("in_axes form") for s in calls] == ["flat tuple of 0/None", None, None]
    assert [s.get("body") for s in calls] == ["function in the file", "lambda", "not in the file"]
    assert calls[0]["body calls"] == ["fori_loop"] and calls[1]["out_axes form"] == "None"
    assert calls[0]["static_broadcasted_argnums"] and calls[1]["devices"]
