"""Each rule of ``pmapkit migrate`` has a test that fails without it: every
call, name and attribute rule of the merged tables has a sample here (a rule
added without one fails ``test_every_rule_has_a_sample``), and every move a
family writes itself is tried in both import forms. The census's generated
renames are data: ``test_migrate_rules`` holds them to the census.
(``tests/migrate_mutations.py --rules`` takes each rule out in turn.)"""
import pytest

from pmapkit.tools.migrate import migrate_source, rules_trees_ops, transformer

from _migrate_helpers import without_helpers

MOVES, NAMES, CALLS, ATTRIBUTES, _REASONS = transformer.tables()
FAMILY_MOVES = sorted(k for k in MOVES if k not in rules_trees_ops.census_tables()[0])

# classic call → (a statement using it, what the migrated statement reads)
CALL_SAMPLES = {
    "jax.config.update": (
        "jax.config.update('jax_default_matmul_precision', jax.lax.Precision.HIGHEST)",
        "jax.config.update('jax_default_matmul_precision', 'highest')"),
    "jax.config.config.update": (
        "jax.config.config.update('jax_default_matmul_precision', jax.lax.Precision.DEFAULT)",
        "jax.config.update('jax_default_matmul_precision', 'default')"),
    "jax.experimental.global_device_array.GlobalDeviceArray.from_callback": (
        "a = jax.experimental.global_device_array.GlobalDeviceArray.from_callback("
        "(8,), m, ['x'], cb)",
        "a = jax.make_array_from_callback((8,), jax.sharding.NamedSharding(m, jax.P('x')), cb)"),
    "jax.device_put_replicated": ("r = jax.device_put_replicated(x, ds)",
                                  "r = _device_put_replicated(x, ds)"),
    "jax.device_put_sharded": ("r = jax.device_put_sharded(xs, ds)",
                               "r = _device_put_sharded(xs, ds)"),
    "jax.experimental.disable_x64": ("c = jax.experimental.disable_x64()",
                                     "c = jax.enable_x64(False)"),
    "jax.experimental.enable_x64": ("c = jax.experimental.enable_x64()",
                                    "c = jax.enable_x64(True)"),
    "jax.experimental.export.call": ("y = jax.experimental.export.call(e)(x)", "y = e.call(x)"),
    "jax.experimental.jax2tf.jax_export.call": (
        "y = jax.experimental.jax2tf.jax_export.call(e)(x)", "y = e.call(x)"),
    "jax.experimental.export.call_exported": ("y = jax.experimental.export.call_exported(e)(x)",
                                              "y = e.call(x)"),
    "jax.experimental.export.deserialize": ("e = jax.experimental.export.deserialize(b)",
                                            "e = jax.export.deserialize(b)"),
    "jax.experimental.export.export": ("e = jax.experimental.export.export(f)(x)",
                                       "e = jax.export.export(jax.jit(f))(x)"),
    "jax.experimental.export.serialize": ("b = jax.experimental.export.serialize(e)",
                                          "b = e.serialize()"),
    "jax.experimental.host_callback.barrier_wait": (
        "jax.experimental.host_callback.barrier_wait()", "jax.effects_barrier()"),
    "jax.experimental.host_callback.call": (
        "y = jax.experimental.host_callback.call(f, x, result_shape=s)",
        "y = _host_call(f, x, s)"),
    "jax.experimental.host_callback.id_print": ("y = jax.experimental.host_callback.id_print(x)",
                                                "y = _id_print(x)"),
    "jax.experimental.host_callback.id_tap": ("y = jax.experimental.host_callback.id_tap(t, x)",
                                              "y = _id_tap(t, x)"),
    "jax.experimental.jax2tf.jax_export.call_exported": (
        "y = jax.experimental.jax2tf.jax_export.call_exported(e)(x)", "y = e.call(x)"),
    "jax.experimental.jax2tf.jax_export.deserialize": (
        "e = jax.experimental.jax2tf.jax_export.deserialize(b)",
        "e = jax.export.deserialize(b)"),
    "jax.experimental.jax2tf.jax_export.export": (
        "e = jax.experimental.jax2tf.jax_export.export(f)(x)",
        "e = jax.export.export(jax.jit(f))(x)"),
    "jax.experimental.jax2tf.jax_export.serialize": (
        "b = jax.experimental.jax2tf.jax_export.serialize(e)", "b = e.serialize()"),
    "jax.experimental.pjit.pjit": ("g = jax.experimental.pjit.pjit(f)", "g = jax.jit(f)"),
    "jax.experimental.pjit.with_sharding_constraint": (
        "y = jax.experimental.pjit.with_sharding_constraint(x, s)",
        "y = jax.lax.with_sharding_constraint(x, s)"),
    "jax.experimental.shard_map.shard_map": (
        "g = jax.experimental.shard_map.shard_map(f, m, i, o)",
        "g = jax.shard_map(f, mesh=m, in_specs=i, out_specs=o)"),
    "jax.lax.tie_in": ("y = jax.lax.tie_in(x, z)", "y = z"),
    "jax.ops.index_add": ("y = jax.ops.index_add(x, i, v)", "y = x.at[i].add(v)"),
    "jax.ops.index_max": ("y = jax.ops.index_max(x, i, v)", "y = x.at[i].max(v)"),
    "jax.ops.index_min": ("y = jax.ops.index_min(x, i, v)", "y = x.at[i].min(v)"),
    "jax.ops.index_mul": ("y = jax.ops.index_mul(x, i, v)", "y = x.at[i].multiply(v)"),
    "jax.ops.index_update": ("y = jax.ops.index_update(x, i, v)", "y = x.at[i].set(v)"),
    "jax.pmap": ("g = jax.pmap(f, 'i')", "    check_vma=False))"),
    "jax.random.shuffle": ("y = jax.random.shuffle(k, x)",
                           "y = jax.random.permutation(k, x, independent=True)"),
    "jax.shard_map": ("g = jax.shard_map(f, out_specs=o, check_rep=False)",
                      "g = jax.shard_map(f, out_specs=o, check_vma=False)"),
    "jax.make_mesh": ("m = jax.make_mesh((8,), ('x',))",
                      "m = jax.make_mesh((8,), ('x',), axis_types=(jax.sharding.AxisType.Auto,))"),
}
NAME_SAMPLES = {
    "jax.experimental.maps.thread_resources.env.physical_mesh": (
        "m = jax.experimental.maps.thread_resources.env.physical_mesh",
        "m = jax.sharding.get_abstract_mesh()"),
    "jax.interpreters.pxla.thread_resources.env.physical_mesh": (
        "m = jax.interpreters.pxla.thread_resources.env.physical_mesh",
        "m = jax.sharding.get_abstract_mesh()"),
}
ATTRIBUTE_SAMPLES = {
    "device_buffer": ("b = x.device_buffer", "b = x.addressable_data(0)"),
    "device_buffers": ("b = x.device_buffers", "b = _device_buffers(x)"),
}


def test_every_rule_has_a_sample():
    assert set(CALL_SAMPLES) == set(CALLS)
    assert set(NAME_SAMPLES) == set(NAMES)
    assert set(ATTRIBUTE_SAMPLES) == set(ATTRIBUTES)


def _statement(source):
    """The migrated last line of ``import jax`` + ``source``, and the report."""
    new, report = migrate_source(f"import jax\n\n{source}\n")
    return without_helpers(new).rstrip("\n").splitlines()[-1], report


@pytest.mark.parametrize("rule", sorted({**CALL_SAMPLES, **NAME_SAMPLES,
                                         **ATTRIBUTE_SAMPLES}))
def test_each_rule_rewrites_its_sample(rule):
    classic, modern = {**CALL_SAMPLES, **NAME_SAMPLES, **ATTRIBUTE_SAMPLES}[rule]
    line, report = _statement(classic)
    assert line == modern, report.format()
    assert report.left == [] and len(report.rewrites) >= 1


@pytest.mark.parametrize("classic", FAMILY_MOVES)
def test_each_move_rewrites_a_reference_and_an_import(classic):
    _family, modern = MOVES[classic]
    line, report = _statement(f"x = {classic}")
    assert line == f"x = {modern}", report.format()
    owner, _, name = classic.rpartition(".")
    new, report = migrate_source(f"from {owner} import {name}\n\nx = {name}\n")
    new_owner, _, new_name = modern.rpartition(".")
    alias = "" if new_name == name else f" as {name}"
    if new_owner:
        assert new.splitlines()[0] == f"from {new_owner} import {new_name}{alias}", new
    else:       # a module moved to a package of its own (optix: optax)
        assert new.splitlines()[0] == f"import {new_name}{alias}", new
    assert report.left == []
