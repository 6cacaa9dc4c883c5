"""The dispatch core's cache keys: every form round-trips, and the rules
kept once.

The core signs calls (``_dispatch.py``, which imports nothing of pmapkit
but its hit path) and reads its keys back with ``decode_key`` (``_keys.py``,
the key format); both follow ``KEY_VERSION``. Each form of key is held here to a literal layout and to
what ``decode_key`` reads out of it, so a change to the signing that the
decoder does not follow fails here (``KeyFormatError`` or a mismatch),
never silently in ``_debug_cache_keys``. A static argument is keyed by one
function (``static_entry``, used by ``_cache_keys`` too) and a donated alias
found by one (``_feed.find_donated_alias``, asked by the hit path and,
with the layout test, the miss path). On the compiled core and
(``PMAPKIT_PUREPYTHON=1``) the pure one.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pmapkit
from pmapkit.core.keys import _cache_keys
from pmapkit.core.programs import compiled_program
from pmapkit.core.hitpath._compiled import feed as _feed_mod
from pmapkit.core.hitpath._compiled import keys as _keys_mod

N = len(jax.devices())
F32 = np.dtype("float32")


def _id_of(f, sig):
    """The interned id of leaf signature ``sig`` in ``f``'s tables."""
    return f._shared.sig_ids[sig]


def _sig_of(f, leaf_id):
    return {i: s for s, i in f._shared.sig_ids.items()}[leaf_id]


def _round_trip(f, args, kwargs, want_key, want_parts):
    """``f``'s key of the call is ``want_key(ids)`` and decodes to
    ``want_parts`` (with ``leaf_ids`` and ``statics`` as given)."""
    key = f._debug_compute_cache_key(*args, **kwargs)
    assert key is not None
    assert key == want_key, (key, want_key)
    parts = f._debug_decode_key(key)
    assert parts["version"] == _keys_mod.KEY_VERSION
    for name, value in want_parts.items():
        assert parts[name] == value, (name, parts[name], value)
    # The call runs, hits its entry, and is put into words without error.
    f(*args, **kwargs)
    f(*args, **kwargs)
    assert f._cache_size >= 1
    assert "The cache contains" in f._debug_cache_keys()
    return parts


def test_key_format_version():
    # Changing the signing means changing decode_key and the layouts below:
    # bump KEY_VERSION with them.
    assert _keys_mod.KEY_VERSION == 1
    assert _keys_mod.KWARGS_MARK == "**kwargs"


def test_one_leaf_key_round_trips():
    f = pmapkit.pjit(lambda x: x + 1)
    x = jnp.ones(4)
    f(x)
    a = _id_of(f, (F32, (4,), False))
    _round_trip(f, (x,), {}, (1, a), {
        "arguments": ["leaf"], "leaf_ids": [a], "statics": (),
        "static_keywords": (), "keywords": [], "kwargs_marked": False,
        "treedef": None})


def test_many_leaves_lists_and_tuples_round_trip():
    f = pmapkit.pjit(lambda x, l, t, s: x + l[0] + l[1] + t[0] + s)
    x, i = jnp.ones(4), jnp.ones(1)
    args = (x, [x, i], (i,), 2.0)
    f(*args)
    a, b, c = (_id_of(f, (F32, (4,), False)), _id_of(f, (F32, (1,), False)),
               _id_of(f, float))
    # A list of n leaves is -2 - 2n, a tuple of n is -3 - 2n.
    _round_trip(f, args, {}, (4, a, -6, a, b, -5, b, c), {
        "arguments": ["leaf", ("list", 2), ("tuple", 1), "leaf"],
        "leaf_ids": [a, a, b, b, c], "statics": (), "kwargs_marked": False})


def test_statics_by_position_and_keyword_round_trip():
    f = pmapkit.pjit(lambda x, n, *, m: x * n * m, static_argnums=1,
                     static_argnames="m")
    x = jnp.ones(4)
    f(x, 2, m=3.0)
    a = _id_of(f, (F32, (4,), False))
    _round_trip(f, (x, 2), {"m": 3.0},
                (2, a, (1, int, 2), "**kwargs", ("m", float, 3.0)), {
                    "arguments": ["leaf"], "leaf_ids": [a],
                    "statics": ((1, int, 2),), "static_keywords": (("m", float, 3.0),),
                    "keywords": [], "kwargs_marked": True})
    # 2, 2.0 and True are == but key apart (static_entry: the type too).
    keys = {f._debug_compute_cache_key(x, n, m=1) for n in (2, 2.0, True)}
    assert len(keys) == 3


def test_dynamic_keywords_follow_the_kwargs_mark_in_name_order():
    f = pmapkit.pjit(lambda x, **kw: x + kw["b"] + kw["a"])
    x, i = jnp.ones(4), jnp.ones(1)
    f(x, b=x, a=i)
    a, b = _id_of(f, (F32, (4,), False)), _id_of(f, (F32, (1,), False))
    _round_trip(f, (x,), {"b": x, "a": i}, (1, a, "**kwargs", "a", b, "b", a), {
        "arguments": ["leaf"], "keywords": ["a", "b"], "leaf_ids": [a, b, a],
        "kwargs_marked": True})
    # Not the key of the same leaves passed by position.
    assert f._debug_compute_cache_key(x, x, i) != f._debug_compute_cache_key(x, b=x, a=i)


def test_flattened_keys_round_trip_with_statics_and_keywords():
    f = pmapkit.pjit(lambda d, n, *, k, s: d["a"] * n + k * s, static_argnums=1,
                     static_argnames="s")
    x = jnp.ones(4)
    args, kwargs = ({"a": x}, 3), {"k": x, "s": 2}
    f(*args, **kwargs)
    a = _id_of(f, (F32, (4,), False))
    treedef = jax.tree_util.tree_structure((({"a": 0},), {"k": 0}))
    parts = _round_trip(f, args, kwargs,
                        (treedef, ((1, int, 3),), "**kwargs", (("s", int, 2),), a, a), {
                            "arguments": None, "treedef": treedef,
                            "statics": ((1, int, 3),),
                            "static_keywords": (("s", int, 2),),
                            "kwargs_marked": True, "leaf_ids": [a, a]})
    assert _cache_keys._trees(parts)[1] == ["k"]
    # Without static positions the slot is absent.
    g = pmapkit.pjit(lambda d: d["a"] + 1)
    g({"a": x})
    b = _id_of(g, (F32, (4,), False))
    _round_trip(g, ({"a": x},), {}, (jax.tree_util.tree_structure(({"a": 0},)), b),
                {"statics": (), "kwargs_marked": False, "leaf_ids": [b]})


def test_committed_sharding_is_in_the_leaf_signature():
    # pjit with no shardings follows a committed input's placement.
    f = pmapkit.pjit(lambda x: x * 2)
    d1 = jax.devices()[1]
    x = jax.device_put(jnp.ones(4), d1)
    f(x)
    key = f._debug_compute_cache_key(x)
    sig = _sig_of(f, key[1])
    assert sig[0] == "placed" and sig[2] == x.sharding
    assert _sig_of(f, sig[1]) == (F32, (4,), False)
    _round_trip(f, (x,), {}, (1, key[1]), {"leaf_ids": [key[1]]})
    assert "committed to" in f._debug_cache_keys()


def test_global_bit_and_placed_signatures_are_put_into_words():
    # A program spanning processes signs global arrays ("global", id); one
    # process has none, so the table is given here.
    table = {(F32, (4,), False): 0, ("global", 0): 1, ("placed", 0, "S"): 2, int: 3}
    words = {i: _cache_keys._leaf_words({v: k for k, v in table.items()}, i)
             for i in range(4)}
    assert words == {0: "float32[4]", 1: "float32[4] (global array)",
                     2: "float32[4] committed to S", 3: "Python int scalar"}


@pytest.mark.parametrize("key, why", [
    ((2, 0), "ends before argument 1"),
    ((1, (int, 0, 1)), "is no static_entry"),  # (type, position, value)
    ((1, 0, "k", 0), "only KWARGS_MARK may follow"),
    ((1, -6, 0), "a list of 2 leaves wants 2 leaf ids"),
    ((1, 0, "**kwargs", "k"), "is no keyword"),
    ((1, 1.5), "neither a leaf id"),
])
def test_keys_of_another_format_raise_key_format_error(key, why):
    with pytest.raises(_keys_mod.KeyFormatError, match=why):
        _keys_mod.decode_key(key, False)
    with pytest.raises(_keys_mod.KeyFormatError, match="bump KEY_VERSION"):
        _keys_mod.decode_key(key, False)


def test_flattened_keys_of_another_format_raise():
    treedef = jax.tree_util.tree_structure(((0, 0),))
    with pytest.raises(_keys_mod.KeyFormatError, match="2 leaves, the key 1"):
        _keys_mod.decode_key((treedef, 0), False)
    with pytest.raises(_keys_mod.KeyFormatError, match="positional static_entry"):
        _keys_mod.decode_key((treedef, 0, 1), True)
    with pytest.raises(_keys_mod.KeyFormatError, match="KWARGS_MARK or a leaf id"):
        _keys_mod.decode_key((treedef, "k", (), 0, 1), False)


def test_every_key_uses_the_one_static_rule():
    assert _cache_keys.static_entry is _keys_mod.static_entry
    assert {_cache_keys.static_entry(0, v) for v in (1, 1.0, True)} == {
        (0, int, 1), (0, float, 1.0), (0, bool, True)}
    assert _cache_keys.static_keywords_key({"b": 1, "a": 1.0}) == (
        ("a", float, 1.0), ("b", int, 1))
    assert not _cache_keys.same_static(1, 1.0) and _cache_keys.same_static(2.0, 2.0)
    assert not _cache_keys.same_static(np.ones(2), np.ones(2))  # an __eq__ that raises
    assert _cache_keys.typed_key((1, [2.0])) != _cache_keys.typed_key((1, [2]))
    assert _cache_keys.params_key([{}]) is not None
    assert _cache_keys.params_key(np.ones(2)) is None  # unhashable: shares nothing
    # The trace cache keys statics with it too.
    key, _ = _cache_keys.trace_key((1,), (jnp.ones(2), 2.0), {}, None)
    assert key[2] == ((1, float, 2.0),)


def test_hit_and_miss_paths_ask_the_one_alias_rule():
    f = pmapkit.pmap(lambda a, b, c: a + b + c, donate_argnums=(0, 2))
    a, b, c = (jnp.arange(float(N * 2)).reshape(N, 2) + i for i in range(3))
    fastpath = f._cache_miss(a, b, c)[1]
    entry = _feed_mod.CacheEntry()
    entry.populate(fastpath, compiled_program.LEAF_TYPES)
    donated = fastpath.donated
    host = np.ones((N, 2), np.float32)
    cases = {(0, 1, 2): None, (0, 0, 2): (0, 1), (0, 1, 0): (0, 2), (1, 1, 2): (0, 1),
             (0, 2, 2): (1, 2), (2, 1, 0): None, (0, 1, 1): (1, 2)}
    by_name = (a, b, c)
    for picks, want in cases.items():
        leaves = [by_name[k] for k in picks]
        assert compiled_program.find_donated_alias(leaves, donated) == want, picks
        assert entry.aliases_donated(leaves) == (want is not None), picks
    assert compiled_program.find_donated_alias([host, host, c], donated) is None
    # The miss path leaves out a donated array that moves (it is copied).
    moved = jax.device_put(a, jax.devices()[0])
    shardings = fastpath.program.in_shardings
    assert compiled_program.find_donated_alias([moved, moved, c], donated) == (0, 1)
    assert compiled_program.find_donated_alias([moved, moved, c], donated, shardings) is None
    in_place = jax.device_put(a, shardings[0])
    assert compiled_program.find_donated_alias([in_place, in_place, c], donated, shardings) == (0, 1)
