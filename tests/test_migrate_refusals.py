"""Every refusal of ``pmapkit migrate``'s rules: the code stays as written
(only a ``# pmapkit migrate:`` comment above it), and the report's LEFT line
(or ``kept jax.pmap`` line) says why. ``tests/migrate_mutations.py`` removes
each refusal in turn and counts the tests here that fail."""
import textwrap

import jax
import numpy as np
import pytest

from pmapkit.tools.migrate import migrate_source

HCB = "from jax.experimental import host_callback as hcb\n"
PJIT = "from jax.experimental.pjit import pjit\n"
WSC = "from jax.experimental.pjit import with_sharding_constraint\n"
EXPORT = "from jax.experimental import export\n"
JAX_EXPORT = "from jax.experimental.jax2tf import jax_export\n"
SHARD_MAP = "from jax.experimental.shard_map import shard_map\n"
JAX = "import jax\n"

# (imports, the statement, the classic name left, words of the reason)
LEFT = [
    # host_callback
    (HCB, "y = hcb.id_tap(*taps)", "id_tap", "can't be read statically"),
    (HCB, "y = hcb.id_tap(tap, x, device_index=1)", "id_tap", "device_index picks one"),
    (HCB, "y = hcb.id_tap(tap, x, callback_flavor=flavor)", "id_tap", "callback_flavor="),
    (HCB, "y = hcb.id_tap(tap)", "id_tap", "needs tap_func and arg"),
    (HCB, "y = hcb.id_print(**options)", "id_print", "**kwargs can't be read"),
    (HCB, "y = hcb.id_print(x, z)", "id_print", "takes one positional argument"),
    (HCB, "y = hcb.id_print(x, device_index=1)", "id_print", "device_index picks one"),
    (HCB, "y = hcb.id_print(x, output_stream=log)", "id_print", "output_stream= has no"),
    (HCB, "y = hcb.id_print(x, threshold=3)", "id_print", "threshold= has no"),
    (HCB, "y = hcb.call(*parts)", "call", "can't be read statically"),
    (HCB, "y = hcb.call(f, x, result_shape=s, call_with_device=True)", "call",
     "call_with_device=True where the callback uses the device for more than its id"),
    (HCB, "y = hcb.call(f, x, result_shape=s, device_index=2)", "call", "device_index"),
    (HCB, "y = hcb.call(f, x, result_shape=s, callback_flavor=k)", "call", "callback_flavor="),
    (HCB, "y = hcb.call(f, x)", "call", "a call with no result"),
    (HCB, "y = hcb.call(f, x, result_shape=None)", "call", "a call with no result"),
    (HCB, "y = hcb.call(f, result_shape=s)", "call", "needs callback_func and arg"),
    (HCB, "hcb.barrier_wait('tag')", "barrier_wait", "takes only logging_name"),
    (HCB, "tap = hcb.id_tap", "id_tap", "host_callback is gone"),
    # pjit
    (PJIT, "g = pjit(f, *specs)", "pjit", "can't be read statically"),
    (PJIT, "g = pjit(f, backend='cpu')", "pjit", "backend= has no jax.jit equivalent"),
    (PJIT, "g = pjit(f, device=d)", "pjit", "device= has no jax.jit equivalent"),
    (PJIT, "g = pjit(in_axis_resources=None)", "pjit", "pjit without a function"),
    (WSC, "y = with_sharding_constraint(*both)", "with_sharding_constraint",
     "can't be read statically"),
    (WSC, "y = with_sharding_constraint(x)", "with_sharding_constraint",
     "needs x and its shardings"),
    # export
    (EXPORT, "e = export.export(*a)", "export", "can't be read statically"),
    (EXPORT, "e = export.export(lowering_platforms=('cpu',))", "export",
     "export needs the function"),
    (JAX_EXPORT, "e = jax_export.export(fun_jax=f)", "export", "export(fun_jax=...)"),
    (JAX_EXPORT, "b = jax_export.serialize(vjp_order=1)", "serialize",
     "serialize needs the Exported"),
    (JAX_EXPORT, "c = jax_export.call_exported()", "call_exported",
     "call_exported needs the Exported"),
    # placement
    (JAX, "r = jax.device_put_replicated(x)", "device_put_replicated", "needs x and devices"),
    (JAX, "r = jax.device_put_sharded(*a)", "device_put_sharded", "can't be read statically"),
    # trees and ops
    (JAX, "x = jax.ops.index_update(x, 0)", "index_update", "needs x, idx and y"),
    (JAX, "x = jax.lax.tie_in(x)", "tie_in", "tie_in(x, y) is y"),
    (JAX, "x = jax.random.shuffle(key)", "shuffle", "jax.random.permutation"),
    (JAX, "x = jax.ops.index_add(*a)", "index_add", "rewrite it by hand"),
    (JAX, "with jax.experimental.enable_x64(True, 1):\n    pass", "enable_x64",
     "more positional arguments"),
    # deprecated modern spellings
    (SHARD_MAP, "g = shard_map(*a)", "shard_map", "can't be read statically"),
    (SHARD_MAP, "g = shard_map(f, make_mesh(), P(), P(), auto={'j'})", "shard_map",
     "auto= with a mesh that is not a plain name"),
    (SHARD_MAP, "g = shard_map(mesh=m, f=h, in_specs=P(), out_specs=P())", "shard_map",
     "without its function first"),
]


@pytest.mark.parametrize("imports, statement, name, why", LEFT,
                         ids=[f"{k}-{s[:40]}" for k, (_i, s, _n, _w) in enumerate(LEFT)])
def test_a_refused_use_stays_as_written_and_the_report_says_why(imports, statement, name,
                                                               why):
    source = imports + "\n" + statement + "\n"
    new, report = migrate_source(source)
    # unchanged but for the comment above it (and, where the file draws
    # jax.random numbers, the helper that keeps the classic streams: a
    # migration never changes a value)
    prng = ["_classic_prng"] if "jax.random" in source else []
    assert [line for line in _without_helper(new, prng)
            if not line.startswith("# pmapkit migrate:")] \
        == [line for line in source.splitlines() if line.strip() or not prng], new
    assert report.rewrites == [] and report.helpers == prng
    assert len(report.left) == 1, report.format()
    left = report.left[0]
    assert left.line == source.splitlines().index(statement.splitlines()[0]) + 1
    assert left.name.rpartition(".")[2] == name and why in left.why, left
    comment = [line for line in new.splitlines() if line.startswith("# pmapkit migrate:")]
    assert comment == [f"# pmapkit migrate: {left.name} left as written: {left.why}"]


def _without_helper(new, helpers):
    """The lines of ``new`` less the written-in helpers named (their
    definition, their call) and the blank lines around them."""
    from pmapkit.tools.migrate.helpers import ALL
    inline = {line for h in helpers if ALL[h].inline for line in ALL[h].source.splitlines()}
    lines, skipping = [], False
    for line in new.splitlines():
        if line in inline:      # an inline helper's statement and its comment
            continue
        if any(line.startswith(f"def {h}(") for h in helpers):
            skipping = True
        elif skipping and not line.startswith((" ", "\t")) and line.strip():
            skipping = False
            if any(line == f"{h}()" for h in helpers):
                continue
        if not skipping and (line.strip() or not helpers):
            lines.append(line)
    return lines


KEPT = [
    ("g = jax.pmap(axis_name='i')", "a pmap without its function"),
    ("g = jax.pmap(f, *options)", "can't be read statically"),
    # (out_axes and in_axes of any form migrate: tests/test_migrate_pmap_forms.py)
    ("g = jax.pmap(f, axis_size=4)", "axis_size= (a mapped size across processes) is kept"),
    ("g = jax.pmap(f, backend='cpu')", "backend="),
]


@pytest.mark.parametrize("statement, why", KEPT)
def test_a_pmap_kept_stays_jax_pmap_and_the_report_says_why(statement, why):
    source = JAX + "\n" + statement + "\n"
    new, report = migrate_source(source)
    # as written, a comment above it saying why (JAX 0.10's jax.pmap runs it)
    assert new == source.replace(statement, f"# pmapkit migrate: jax.pmap kept: "
                                            f"{report.kept[0].why}\n{statement}")
    assert report.rewrites == [] and report.left == []
    assert [(k.line, k.name) for k in report.kept] == [(3, "jax.pmap")]
    assert why in report.kept[0].why


def test_the_call_with_device_refusal_is_what_keeps_the_callback_right():
    # Classic hcb.call(f, x, call_with_device=True) called f(x, device=...). A
    # callback that uses its device for more than its id is refused: the
    # refusal is what stops a call with a device the migrated code cannot
    # name. The same call without the flag migrates and runs.
    def host(x, device=None):
        assert device is None, "a device was passed"
        return np.asarray(x) * 2

    source = (HCB + "import jax.numpy as jnp\n\n"
              "y = hcb.call(host, jnp.ones(3), result_shape=jax.ShapeDtypeStruct((3,), "
              "jnp.float32){}){}\n")
    new, report = migrate_source(source.format(", call_with_device=True", ""))
    assert report.rewrites == [] and [k.name for k in report.left] == [
        "jax.experimental.host_callback.call"]
    new, report = migrate_source(source.format("", ""))
    assert "_host_call(host, jnp.ones(3), jax.ShapeDtypeStruct" in new and report.left == []
    namespace = {"host": host}
    exec(compile(new, "migrated.py", "exec"), namespace)
    assert namespace["y"].tolist() == [2.0, 2.0, 2.0]
    assert jax.jit(lambda v: jax.pure_callback(host, jax.ShapeDtypeStruct((3,), v.dtype),
                                               v))(np.ones(3, np.float32)).tolist() == [2.0] * 3
