"""The probes of JAX's internals (``pmapkit._jax_private.probes``): each
feature built on a JAX/jaxlib internal turns off, with its reason, where the
internal is not shaped as pmapkit uses it, and the generic path then gives
the same values; the JAX globals pmapkit replaces are replaced only where
probed, and ``replaced.restore()`` puts JAX's back.

A mismatch is simulated by changing a probe's input (a constructor of
another arity, a function with other parameters, a module without the
function), in this process or, for what pmapkit installs at import, in a
fresh one.
"""
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import pmapkit
from pmapkit import _jax_private as jp
from pmapkit._jax_private import probes
from pmapkit.core.programs import compiled_program

ONE = jax.devices()[:1]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_feature_is_on_with_this_jax():
    assert probes.run() == {}
    assert set(probes._PROBES) == set(probes.FEATURES)
    for feature in probes.FEATURES:
        assert probes.off(feature) is None
    with pytest.raises(ValueError, match="no probed feature"):
        probes.off("teleport")


def test_the_boundary_binds_its_later_rooms_at_the_first_name_read_from_them():
    # A fresh process: the package imports core, interop and probes only;
    # probes.off/run first import the rooms that register the other probes;
    # a name of a later room, read from the package, binds every room (the
    # same objects as the rooms'), and so does ``from ... import NAME``.
    script = textwrap.dedent("""
        import json, sys
        def rooms():
            return sorted(m.rsplit(".", 1)[1] for m in sys.modules
                          if m.startswith("pmapkit._jax_private."))
        import pmapkit._jax_private as jp
        out = {"first": rooms()}
        from pmapkit._jax_private import probes
        out["off"] = [probes.off(f) for f in probes.FEATURES]
        out["after_off"] = rooms()
        out["probed"] = sorted(probes._PROBES)
        from pmapkit._jax_private import compiled_cpp_call, runtime, effects, express
        out["same"] = [jp.compiled_cpp_call is runtime.compiled_cpp_call is compiled_cpp_call,
                       jp.express_cpp_call is express.express_cpp_call,
                       jp.apply_primitive is effects.apply_primitive,
                       jp.fast_dispatch_despite is jp.replaced.fast_dispatch_despite]
        try:
            jp.no_such_name
        except AttributeError as exc:
            out["missing"] = str(exc)
        print(json.dumps(out))
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-P", "-c", script], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=True)
    import json
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["first"] == ["core", "interop", "probes"]
    assert out["off"] == [None] * len(probes.FEATURES)
    assert out["after_off"] == ["core", "effects", "express", "interop", "probes",
                                "replaced", "runtime"]
    assert out["probed"] == sorted(probes.FEATURES)
    assert out["same"] == [True] * 4
    assert "no_such_name" in out["missing"]


def _pjit_of_ten(function_name, fun, cache_miss, static_argnums, static_argnames,
                 global_cache_key, pytree_registry, shard_arg_fallback, cache, layouts):
    raise TypeError("pmapkit called a constructor its probe refused")


def _pjit_renamed(name, fun, cache_miss, static_argnums, static_argnames,
                  global_cache_key, pytree_registry, shard_arg_fallback, cache=None):
    raise TypeError("pmapkit called a constructor its probe refused")


def test_the_cpp_pjit_probe_reads_arity_and_names():
    assert probes.cpp_pjit_reason(jp.express.cpp_pjit) is None
    why = probes.cpp_pjit_reason(_pjit_of_ten)
    assert why == ("jaxlib's C++ pjit also requires cache, layouts (pmapkit passes "
                   "8 arguments)")
    why = probes.cpp_pjit_reason(_pjit_renamed)
    assert why.startswith("jaxlib's C++ pjit takes (name, fun,")
    assert probes.cpp_pjit_reason(object()) == "jaxlib's C++ pjit does not tell its parameters"


def test_a_cpp_pjit_of_another_arity_turns_the_express_off(monkeypatch):
    monkeypatch.setattr(jp.express, "cpp_pjit", _pjit_of_ten)
    # The express's states are watched once per process: kept as they are.
    monkeypatch.setattr(compiled_program, "_watched_entries", -1)
    try:
        assert "also requires cache, layouts" in probes.run()["express"]
        f = pmapkit.pmap(lambda a: a * 2 + 1, devices=ONE)
        for i in range(4):
            x = np.full((1, 3), float(i), np.float32)
            np.testing.assert_array_equal(np.asarray(f(x)), x * 2 + 1)
        assert f._express is None
        (entry,) = [e for c in f._shared.caches.values() for e in c.values()]
        assert entry.make_express is None and entry.express is None
        assert jp.watch_trace_context_states(lambda: None) is None
    finally:
        monkeypatch.undo()
        probes.run()
    assert probes.off("express") is None
    g = pmapkit.pmap(lambda a: a * 2 + 1, devices=ONE)
    x = np.ones((1, 3), np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(g(x)), x * 2 + 1)
    assert g._express is not None  # on again: the express takes the calls


def test_the_fastpath_data_probe_reads_the_parameters():
    from jax._src import pjit as jax_pjit
    from jax._src.interpreters import pxla
    assert probes.get_fastpath_data_reason(jax_pjit._get_fastpath_data,
                                           pxla.ExecuteReplicated) is None

    def renamed(executable, out_tree, args, out_flat, effects, *rest):
        return None
    why = probes.get_fastpath_data_reason(renamed, pxla.ExecuteReplicated)
    assert why.startswith("jax._src.pjit._get_fastpath_data takes (executable, out_tree, args,")

    class Replicated:
        def __init__(self):
            self.ordered_effects = ()
    why = probes.get_fastpath_data_reason(jax_pjit._get_fastpath_data, Replicated)
    assert why == "pxla.ExecuteReplicated sets no has_unordered_effects"
    assert (probes.get_fastpath_data_reason(None, pxla.ExecuteReplicated)
            == "jax._src.pjit has no _get_fastpath_data")


def test_the_cached_shard_map_probe_reads_the_module():
    import types
    assert probes.cached_shard_map_reason(probes.pmap_module()) is None
    empty = types.ModuleType("jax._src.pmap")
    assert (probes.cached_shard_map_reason(empty)
            == "jax._src.pmap has no _cached_shard_map")
    unread = types.ModuleType("jax._src.pmap")
    unread._cached_shard_map = lambda *args: None
    assert (probes.cached_shard_map_reason(unread)
            == "nothing in jax._src.pmap reads _cached_shard_map as a module global")
    assert probes.cached_shard_map_reason(None) == "jax has no jax._src.pmap"


def _run(script):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_a_fastpath_data_of_other_parameters_is_left_as_jax_s():
    # pmapkit's host_callback would replace it at import: with parameters
    # pmapkit does not know, JAX's stays, and host callbacks take JAX's
    # Python dispatch, with the same values.
    out = _run("""
        import jax, numpy as np
        from jax._src import pjit as jax_pjit
        original = jax_pjit._get_fastpath_data
        def _get_fastpath_data(executable, out_tree, args, out_flat, effects, *rest):
            return original(executable, out_tree, args, out_flat, effects, *rest)
        jax_pjit._get_fastpath_data = _get_fastpath_data
        from pmapkit._jax_private import probes, replaced
        from pmapkit.host_callback import call
        f = jax.jit(lambda x: call(lambda v: v * 3, x, result_shape=x))
        values = [float(f(np.float32(i))) for i in range(3)]
        print(values, jax_pjit._get_fastpath_data is _get_fastpath_data,
              sorted(replaced.REPLACED), probes.off("host callback fast dispatch")[:46])
    """)
    assert out == ("[0.0, 3.0, 6.0] True [] "
                   "jax._src.pjit._get_fastpath_data takes (execut")


def test_replaced_globals_are_listed_and_restored():
    out = _run("""
        import jax, numpy as np
        from jax._src import pjit as jax_pjit, pmap as jax_pmap
        jax_fastpath, jax_shard_map = jax_pjit._get_fastpath_data, jax_pmap._cached_shard_map
        import pmapkit
        from pmapkit._jax_private import replaced
        before = sorted(replaced.REPLACED)  # nothing until a system needs it
        from pmapkit.host_callback import call
        g = pmapkit.pmap(lambda a: a + 1)
        y = g(np.ones((jax.device_count(), 2), np.float32))
        during = sorted(replaced.REPLACED)
        replaced.restore()
        back = (jax_pjit._get_fastpath_data is jax_fastpath,
                jax_pmap._cached_shard_map is jax_shard_map)
        f = jax.jit(lambda x: call(lambda v: v * 3, x, result_shape=x))
        values = [float(f(np.float32(i))) for i in range(3)]
        print(before, during, back, values, float(np.asarray(g(y)).sum()))
    """)
    n = jax.device_count()
    assert out == ("[] [('jax._src.pjit', '_get_fastpath_data'), "
                   "('jax._src.pmap', '_cached_shard_map')] (True, True) "
                   f"[0.0, 3.0, 6.0] {float(3 * 2 * n)}")


def test_a_pmap_module_without_the_function_is_left_alone():
    out = _run("""
        import types, jax, numpy as np
        from jax._src import pmap as jax_pmap
        jax_shard_map = jax_pmap._cached_shard_map
        import pmapkit
        from pmapkit._jax_private import probes, replaced
        probes.pmap_module = lambda: types.ModuleType("jax._src.pmap")
        probes.run()
        n = jax.device_count()
        x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        y = jax.pmap(lambda a: a * 2)(x)
        z = pmapkit.pmap(lambda a: a + 1)(y)
        print(probes.off("jax.pmap outputs"), jax_pmap._cached_shard_map is jax_shard_map,
              sorted(replaced.REPLACED), bool((np.asarray(z) == x * 2 + 1).all()))
    """)
    assert out == "jax._src.pmap has no _cached_shard_map True [] True"


class _ArrayWithoutGetters:
    """An array class whose ``aval`` is a plain attribute (no property)."""
    aval = None
    _sharding = property(lambda self: None)
    _committed = property(lambda self: None)

    def is_deleted(self):
        return False


def test_the_getters_probe_reads_the_classes():
    state_type = type(jp.top_level_probe()[0])
    assert probes.getters_reason(jp.ArrayImpl, state_type) is None
    assert probes.getters_reason(_ArrayWithoutGetters, state_type) == (
        "_ArrayWithoutGetters.aval is not a property with a getter")
    assert probes.getters_reason(jp.ArrayImpl, _ArrayWithoutGetters) == (
        "_ArrayWithoutGetters.value is not a property with a getter")


def test_getters_off_read_by_name_with_the_same_values(monkeypatch):
    x = jax.device_put(np.arange(4, dtype=np.float32).reshape(1, 4), ONE[0])
    on = jp.array_readers()
    state, value_of = jp.top_level_probe()[0], jp.state_value_of()
    monkeypatch.setattr(probes, "GETTERS", ("aval", "not_an_attribute"))
    try:
        assert "not_an_attribute is not a property" in probes.run()["hit-path getters"]
        off = jp.array_readers()
        assert off[0] is not on[0]
        for read_on, read_off in zip(on, off):
            assert read_on(x) is read_off(x) or read_on(x) == read_off(x)
        assert jp.state_value_of()(state) is value_of(state) is state.value
        # A wrapper built now reads the trace state by name: the same calls.
        f = pmapkit.pmap(lambda a: a + 1, devices=ONE)
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(x) + 1)
        assert f._debug_dispatch_stats()["misses"] == 1
    finally:
        monkeypatch.undo()
        probes.run()
    assert probes.off("hit-path getters") is None
