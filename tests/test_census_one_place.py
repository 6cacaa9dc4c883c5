"""A census fact is stated once, in the census (``pmapkit.legacy.names`` and
``pmapkit.legacy.census``), and read from there.

``pmapkit migrate`` renamed the tree functions and rewrote ``jax.ops.index_*``
from tables of its own, which drifted (``jax.tree_util.tree_multimap`` became
``jax.tree.map`` there, ``jax.tree_util.tree_map`` in the census); the
release a name without a census removal went in was written out three times;
and the installer built a record in an old field order, so its error read
"use 0.4.14 instead". Each is checked here against the census itself.
"""
import jax

from pmapkit.legacy import _installer, census, names
from pmapkit.tools.migrate import migrate_source, rules_trees_ops


def test_migrate_renames_what_the_census_says():
    family = rules_trees_ops.family()
    checked = 0
    for record in names.NAMES + names.MODULES:
        target = rules_trees_ops.census_rename(record)
        if target is not None:
            assert family.moves.get(record.name) == record.modern, record.name
            checked += 1
    assert checked >= 8
    # The two multimaps, one spelling: the census's.
    assert family.moves["jax.tree_multimap"] == names.by_name("jax.tree_multimap").modern
    assert family.moves["jax.tree_util.tree_multimap"] == \
        names.by_name("jax.tree_util.tree_multimap").modern == "jax.tree.map"


def test_migrate_rewrites_every_census_index_op_with_its_method():
    family = rules_trees_ops.family()
    ops = {n for n in family.calls if n.startswith("jax.ops.index_")}
    assert ops == {f"jax.ops.{n}" for n in names.INDEX_METHODS}
    for name, method in names.INDEX_METHODS.items():
        # The census record names the method migrate writes.
        assert names.by_name(f"jax.ops.{name}").modern == f"x.at[idx].{method}(y)"
        new, _ = migrate_source(f"import jax\nz = jax.ops.{name}(x, 1, y)\n")
        assert f"z = x.at[1].{method}(y)" in new, new


def test_the_release_without_a_census_removal_is_stated_once(monkeypatch):
    monkeypatch.setattr(census, "TARGET_RELEASE", "9.9.9")
    assert names.removal_release("jax.not_a_census_name") == "9.9.9"
    option = names.ConfigOption("jax_not_a_census_option", True, (True,), "why")
    assert option.removed_in == "9.9.9"


def test_a_census_module_without_a_record_reads_as_a_jax_internal():
    name = "jax.experimental.djax"   # a census module JAX 0.10 lacks
    release = census.removed_in(name)
    assert release
    record = _installer.internal_module_record(name)
    assert (record.name, record.modern, record.example) == (name, names.INTERNAL, "")
    text = str(record.error(importing=True))
    assert text == (f"{name} was removed in JAX {names.removal_release(name)}. "
                    f"{names.INTERNAL} on JAX {jax.__version__}, so pmapkit.legacy "
                    "does not provide it.")
    assert "instead" not in text
