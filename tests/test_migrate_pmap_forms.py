"""pmap's translation, form by form. Each form public classic code uses
(counted in ``pmapkit/tools/migrate/usage_census.json``) has a fixture here
(source in, expected source out) and runs both ways in a program of
``tests/migrate_pmap_forms/`` (``--check``: the original under ``pmapkit run
--route-pmap``, the migrated file on plain JAX; the same output). The first
program, ``values_read_at_trace.py``, is the differential suite of what a
pmapped function reads (globals, closure cells, defaults, the functions it
calls) changing between calls."""
import json
import os
import textwrap

import jax
import numpy as np
import pytest

from pmapkit.tools.migrate import helpers, migrate_source

from _migrate_helpers import HERE, migrate, without_helpers

FORMS = os.path.join(HERE, "migrate_pmap_forms")
CENSUS = os.path.join(os.path.dirname(helpers.__file__), "usage_census.json")

# name: (source in, expected source out); each also runs in a FORMS program.
FIXTURES = {
    'call with axis_name': (
        'p_step = jax.pmap(train_step, "batch")\n',
        'p_step = jax.jit(jax.shard_map(\n    _per_device(train_step),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("batch",)), in_specs=jax.P("batch"),\n    out_specs=jax.P("batch"), check_vma=False))\n'),
    'call of a lambda': (
        'y = jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x)\n',
        'y = jax.jit(jax.shard_map(\n    lambda *args: jax.tree.map(\n        lambda leaf: jax.numpy.expand_dims(leaf, 0), (lambda v: lax.psum(v, "i"))(*jax.tree.map(lambda leaf: jax.numpy.squeeze(leaf, 0), args))),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("i",)), in_specs=jax.P("i"), out_specs=jax.P("i"),\n    check_vma=False))(x)\n'),
    'call of a partial': (
        'p = jax.pmap(functools.partial(step, model=m), axis_name="batch")\n',
        'p = jax.jit(jax.shard_map(\n    _per_device(functools.partial(step, model=m)),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("batch",)), in_specs=jax.P("batch"),\n    out_specs=jax.P("batch"), check_vma=False))\n'),
    'call of a method': (
        'self.p_update = jax.pmap(self._update, axis_name="devices")\n',
        'self.p_update = jax.jit(jax.shard_map(\n    _per_device(self._update),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("devices",)), in_specs=jax.P("devices"),\n    out_specs=jax.P("devices"), check_vma=False))\n'),
    'partial decorator with donation': (
        '@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))\ndef update(state, batch):\n    return state\n',
        '@functools.partial(jax.jit, donate_argnums=(0,))\n@functools.partial(jax.shard_map, mesh=jax.sharding.Mesh(jax.local_devices(), ("i",)),\n                   in_specs=jax.P("i"), out_specs=jax.P("i"), check_vma=False)\ndef update(state, batch):\n    state, batch = jax.tree.map(lambda v: jax.numpy.squeeze(v, 0), (state, batch))\n    return jax.tree.map(lambda v: jax.numpy.expand_dims(v, 0), state)\n'),
    'bare decorator': (
        '@jax.pmap\ndef double(v):\n    return v * 2\n',
        '@jax.jit\n@functools.partial(jax.shard_map, mesh=jax.sharding.Mesh(jax.local_devices(), ("devices",)),\n                   in_specs=jax.P("devices"), out_specs=jax.P("devices"), check_vma=False)\ndef double(v):\n    v = jax.tree.map(lambda a: jax.numpy.squeeze(a, 0), v)\n    return jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0), v * 2)\n'),
    'devices': (
        'p = jax.pmap(f, axis_name="d", devices=learner_devices)\n',
        'p = jax.jit(jax.shard_map(\n    _per_device(f),\n    mesh=jax.sharding.Mesh(learner_devices, ("d",)), in_specs=jax.P("d"), out_specs=jax.P("d"),\n    check_vma=False))\n'),
    'static_broadcasted_argnums': (
        'p = jax.pmap(f, axis_name="i", static_broadcasted_argnums=(1, 2))\n',
        'p = (lambda fn, mesh: jax.jit(\n    lambda *args: jax.shard_map(\n        _per_device(fn, static=((1, args[1]), (2, args[2]))),\n        mesh=mesh, in_specs=jax.P("i"), out_specs=jax.P("i"), check_vma=False,\n    )(*[x for k, x in enumerate(args) if k not in (1, 2)]),\n    static_argnums=(1, 2)))(\n    f, jax.sharding.Mesh(jax.local_devices(), ("i",)))\n'),
    'in_axes flat tuple': (
        'p = jax.pmap(f, axis_name="batch", in_axes=(0, 0, None, None))\n',
        'p = jax.jit(jax.shard_map(\n    _per_device(f, in_axes=(0, 0, None, None)),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("batch",)),\n    in_specs=(jax.P("batch"), jax.P("batch"), jax.P(), jax.P()), out_specs=jax.P("batch"),\n    check_vma=False))\n'),
    'in_axes nested tree': (
        'p = jax.pmap(f, in_axes=(0, {"scale": None, "shift": 0}))\n',
        'p = jax.jit(jax.shard_map(\n    _per_device(f, in_axes=(0, {"scale": None, "shift": 0})),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("devices",)),\n    in_specs=(jax.P("devices"), {"scale": jax.P(), "shift": jax.P("devices")}),\n    out_specs=jax.P("devices"), check_vma=False))\n'),
    'in_axes other than 0': (
        'p = jax.pmap(f, in_axes=1)\n',
        'p = jax.jit(jax.shard_map(\n    _per_device(f, in_axes=1),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("devices",)), in_specs=jax.P(None, "devices"),\n    out_specs=jax.P("devices"), check_vma=False))\n'),
    'out_axes': (
        'p = jax.pmap(f, "i", out_axes=(None, 0))\nq = jax.pmap(f, out_axes=1)\n',
        'p = jax.jit(jax.shard_map(\n    _per_device(f, out_axes=(None, 0)),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("i",)), in_specs=jax.P("i"),\n    out_specs=(jax.P(), jax.P("i")), check_vma=False))\nq = jax.jit(jax.shard_map(\n    _per_device(f, out_axes=1),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("devices",)), in_specs=jax.P("devices"),\n    out_specs=jax.P(None, "devices"), check_vma=False))\n'),
    'from jax import pmap': (
        'from jax import pmap\n\np = pmap(f)\n',
        'p = jax.jit(jax.shard_map(\n    _per_device(f),\n    mesh=jax.sharding.Mesh(jax.local_devices(), ("devices",)), in_specs=jax.P("devices"),\n    out_specs=jax.P("devices"), check_vma=False))\n'),
    'static_broadcasted_argnums covering the others': (
        'p = jax.pmap(f, "i", in_axes=(0, 0, 0, None), static_broadcasted_argnums=4)\n',
        'p = (lambda fn, mesh: jax.jit(\n    lambda *args: jax.shard_map(\n        _per_device(fn, in_axes=(0, 0, 0, None), static=((4, args[4]),)),\n        mesh=mesh, in_specs=(jax.P("i"), jax.P("i"), jax.P("i"), jax.P()), out_specs=jax.P("i"),\n        check_vma=False,\n    )(*[x for k, x in enumerate(args) if k not in (4,)]),\n    static_argnums=(4,)))(\n    f, jax.sharding.Mesh(jax.local_devices(), ("i",)))\n'),
    'a pmap of a pmap': (
        'y = jax.pmap(jax.pmap(f, axis_name="inner"), axis_name="outer")(x)\n',
        'y = jax.jit(_first_devices(\n    jax.shard_map, _per_device(_per_device(f)),\n    mesh=jax.sharding.Mesh(numpy.reshape(jax.local_devices(), (-1, 1)), ("outer", "inner")),\n    in_specs=jax.P("outer", "inner"), out_specs=jax.P("outer", "inner"), check_vma=False))(x)\n'),
    'stacked pmap decorators': (
        '@functools.partial(jax.pmap, axis_name="rows")\n'
        '@functools.partial(jax.pmap, axis_name="cols")\ndef f(x):\n    return x\n',
        '@jax.jit\n@functools.partial(_first_devices, jax.shard_map,\n                   mesh=jax.sharding.Mesh(numpy.reshape(jax.local_devices(), (-1, 1)), ("rows", "cols")),\n                   in_specs=jax.P("rows", "cols"), out_specs=jax.P("rows", "cols"), check_vma=False)\n@_per_device\n@_per_device\ndef f(x):\n    return x\n'),
}

# name: (source in, why): pmaps the source cannot say enough about stay as written,
# with a comment (kept: JAX 0.10's jax.pmap runs it; left: it does not).
NOT_TRANSLATED = {
    "a value": ("map_fn = jax.pmap if multi_device else jax.vmap\n",
                "kept", "jax.pmap as a value"),
    "in_axes a name": ("p = jax.pmap(f, in_axes=axes)\n", "kept", "computed at run time"),
    "a negative in_axes": ("q = jax.pmap(f, in_axes=-1)\n", "left", "needs the argument's rank"),
    "a negative out_axes": ("q = jax.pmap(f, out_axes=-1)\n", "left",
                            "needs the argument's rank"),
    "a pmap of a pmap with in_axes 1": (
        'y = jax.pmap(jax.pmap(f, axis_name="inner", in_axes=1), axis_name="outer")(x)\n',
        "left", "stacked pmap decorators are translated with in_axes/out_axes 0 on both"),
    "a pmap of a pmap of a pmap": (
        'y = jax.pmap(jax.pmap(jax.pmap(f, axis_name="a"), axis_name="b"), axis_name="c")(x)\n',
        "left", "a pmap of a pmap"),
    "a pmap made in a pmapped body": (
        '@jax.pmap\ndef outer(a):\n    inner = jax.pmap(lambda v: v, "j")\n    return inner(a)\n',
        "left", "a pmap of a pmap"),
    "in_axes with a starred entry": ("p = jax.pmap(f, in_axes=(*axes,))\n", "kept",
                                     "with a starred entry"),
    "in_axes with a computed key": ("p = jax.pmap(f, in_axes=({key: 0},))\n", "kept",
                                    "keys computed at run time"),
    "statics computed at run time": ("p = jax.pmap(f, static_broadcasted_argnums=nums)\n",
                                     "kept", "static_broadcasted_argnums=nums is computed"),
    "an axis name computed at run time": ("p = jax.pmap(f, axis_name=name_of(x))\n", "kept",
                                          "axis_name=name_of(x) is an expression whose value is known only at run time"),
    "in_axes short of the arguments": (
        "p = jax.pmap(f, in_axes=(0, 0), static_broadcasted_argnums=3)\n", "kept",
        "fewer than the positional arguments"),
    "stacked pmap decorators, one with in_axes 1": (
        '@functools.partial(jax.pmap, axis_name="rows")\n'
        '@functools.partial(jax.pmap, axis_name="cols", in_axes=1)\ndef f(x):\n    return x\n',
        "left", "stacked pmap decorators are translated with in_axes/out_axes 0 on both"),
    "stacked pmap decorators of one axis name": (
        '@functools.partial(jax.pmap, axis_name="i")\n'
        '@functools.partial(jax.pmap, axis_name="i")\ndef f(x):\n    return x\n',
        "left", "stacked pmap decorators are translated with in_axes/out_axes 0 on both"),
    "stacked pmap decorators over a body making a pmap": (
        '@functools.partial(jax.pmap, axis_name="rows")\n'
        '@functools.partial(jax.pmap, axis_name="cols")\ndef f(x):\n'
        '    return jax.pmap(lambda v: v)(x)\n',
        "left", "a pmap of a pmap"),
    "three stacked pmap decorators": (
        '@functools.partial(jax.pmap, axis_name="a")\n@functools.partial(jax.pmap, axis_name="b")\n'
        '@functools.partial(jax.pmap, axis_name="c")\ndef f(x):\n    return x\n',
        "left", "a pmap of a pmap"),
    "a pmapped name called in a pmapped body": (
        'inner = jax.pmap(f, "j")\n\n\n@jax.pmap\ndef outer(a):\n    return inner(a) * 2\n',
        "left", "a pmap of a pmap"),
    "a pmapped name called in a function pmapped below it": (
        'inner = jax.pmap(f, "j")\n\n\ndef outer(a):\n    return inner(a) * 2\n\n\n'
        'y = jax.pmap(outer, "i")(x)\n',
        "left", "a pmap of a pmap"),
    "a pmap of a pmapped name": ('inner = jax.pmap(f, "j")\ny = jax.pmap(inner, "i")(x)\n',
                                 "left", "a pmap of a pmap"),
}

# Each census form seen in at least three files: the fixture above and the
# program running it.
COVERED = {
    "call sites": ("call with axis_name", "argument_forms.py"),
    "form: jax.pmap(f, ...)": ("call with axis_name", "argument_forms.py"),
    "form: @partial(jax.pmap, ...)": ("partial decorator with donation",
                                      "loops_and_collectives.py"),
    "form: @jax.pmap": ("bare decorator", "pytree_arguments.py"),
    "form: jax.pmap as a value (passed or assigned)": ("NOT a value", "argument_forms.py"),
    "axis_name": ("call with axis_name", "loops_and_collectives.py"),
    "donate_argnums": ("partial decorator with donation", "argument_forms.py"),
    "devices": ("devices", "argument_forms.py"),
    "static_broadcasted_argnums": ("static_broadcasted_argnums", "argument_forms.py"),
    "in_axes": ("in_axes flat tuple", "argument_forms.py"),
    "in_axes form: a name or expression": ("NOT in_axes a name", "argument_forms.py"),
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
    # only stacked pmaps cut their 2-D mesh to the argument's leading sizes (no
    # fixture maps a size written as a number: mapped_sizes)
    cut = ["_first_devices"] if name.startswith(("stacked", "a pmap of a pmap")) else []
    # a decorated def whose body takes the mapped axis off itself needs no helper
    own = "_per_device" not in expected
    assert report.left == [] and report.kept == []
    assert report.helpers == ([] if own else ["_per_device"]) + cut, (name, report.helpers)


@pytest.mark.parametrize("name", sorted(NOT_TRANSLATED))
def test_a_pmap_the_source_does_not_say_enough_about_stays_with_its_reason(name):
    source, how, why = NOT_TRANSLATED[name]
    new, report = migrate_source(_imports_and(source))
    records = report.kept if how == "kept" else report.left
    assert records and all(why in k.why for k in records), report.format()
    assert (report.left if how == "kept" else report.kept) == [] and report.rewrites == []
    marker = "jax.pmap kept:" if how == "kept" else "jax.pmap left as written:"
    assert f"# pmapkit migrate: {marker}" in new and source.splitlines()[-1] in new


def test_a_statement_run_in_order_maps_the_name_as_bound_above_it():
    # A notebook maps a plain f, then redefines f as a pmap whose body makes one: the
    # first pmap is translated (its f is no pmap), the nested ones are left.
    new, report = migrate_source(_imports_and(
        'def f(v):\n    return v * 2\n\n\ny = jax.pmap(f)(x)\n\n\n'
        '@jax.pmap\ndef f(v):\n    @jax.pmap\n    def g(z):\n        return z\n'
        '    return g(v)\n\n\nz = jax.pmap(f)(x)\n'))
    assert [r.line for r in report.rewrites] == [8]
    assert sorted(k.line for k in report.left) == [11, 13, 19], report.format()
    assert all("three levels" in k.why for k in report.left if k.line in (11, 13))


def test_every_census_form_seen_in_a_few_files_has_a_fixture_and_a_program():
    census = _census()
    assert census["files with a pmap site"] >= 50 and census["forms"]["call sites"]["sites"] >= 50
    seen = {label for label, counts in census["forms"].items() if counts["files"] >= 3}
    seen |= {f"pytree kind: {kind}" for kind, files
             in census["pytree kinds (files with a pmap site using them)"].items() if files >= 3}
    assert seen - set(COVERED) == set()
    for label in seen:
        fixture, program = COVERED[label]
        assert fixture in FIXTURES or fixture.removeprefix("NOT ") in NOT_TRANSLATED
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
        assert "import pmapkit" not in text, name
        # one pmap passed as a value stays jax.pmap (JAX 0.10 runs it)
        code = "\n".join(line for line in without_helpers(text).splitlines()
                         if not line.strip().startswith("#"))
        assert code.count("jax.pmap") == (1 if name == "argument_forms.py" else 0)
    assert " 0 left, 1 pmap kept" in proc.stdout


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
