"""What loading an artifact and its first call cost pmapkit on top of
jax.export: the modules it imports, and the traces of the first call."""
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

from pmapkit import export as pe

from _export_helpers import sds, values

#: Every pmapkit module a program that loads an artifact and calls it once
#: imports (an artifact with no safety check disabled): the container, the
#: Exported, the call path and the JAX boundary's rooms it reads (``core``,
#: ``interop``); not the exporter, shape polymorphism, the safety checks, the
#: core's pmap/pjit machinery, or the boundary's hit-path and host-callback
#: rooms (``runtime``, ``effects``, ``express``, ``replaced``).
LOAD_AND_CALL = {
    "pmapkit", "pmapkit._jax_private", *(f"pmapkit._jax_private.{m}" for m in (
        "core", "interop", "probes")),
    "pmapkit.export", "pmapkit.export._errors",
    "pmapkit.export._header", "pmapkit.export._container", "pmapkit.export._exported",
    "pmapkit.export._serialize", "pmapkit.export._call"}


def test_load_and_first_call_import_only_the_call_path(tmp_path):
    path = tmp_path / "f.pmkx"
    path.write_bytes(pe.serialize(pe.export(lambda x: jnp.sin(x) * 2)(sds((2, 3)))))
    script = textwrap.dedent(f"""
        import json, sys
        import jax, numpy as np
        jax.devices()
        before = set(sys.modules)
        from pmapkit import export
        loaded = export.deserialize(open({str(path)!r}, "rb").read())
        out = loaded.call(np.ones((2, 3), np.float32))
        jax.block_until_ready(out)
        print(json.dumps(sorted(m for m in set(sys.modules) - before
                                if m.startswith("pmapkit"))))
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-P", "-c", script], env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    imported = set(json.loads(proc.stdout.splitlines()[-1]))
    assert imported == LOAD_AND_CALL, (sorted(imported - LOAD_AND_CALL),
                                       sorted(LOAD_AND_CALL - imported))


def test_first_call_traces_once_and_the_next_not_at_all():
    # A loaded artifact's first top-level call traces one function to a
    # jaxpr (its jit's, binding jax.export's primitive), as jax.export's own
    # call does; later calls of the same signature trace nothing. Counted
    # by JAX's own trace event, which every jit trace records.
    traces = []

    def on_event(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traces.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        blob = pe.serialize(pe.export(lambda x: jnp.cos(x) + 1)(sds((4,))))
        loaded = pe.deserialize(blob)
        x = values((4,))
        del traces[:]
        first = loaded.call(x)
        assert len(traces) == 1, traces
        second = loaded.call(x)
        assert len(traces) == 1, traces
        jax_loaded = jax.export.deserialize(
            jax.export.export(jax.jit(lambda x: jnp.cos(x) + 1))(sds((4,))).serialize())
        del traces[:]
        jax_loaded.call(x)
        assert len(traces) == 1, traces   # jax.export's own first call: the same
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)
    np.testing.assert_allclose(np.asarray(first), np.cos(x) + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(second), np.asarray(first))
