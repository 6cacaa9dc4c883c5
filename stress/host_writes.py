"""A numpy input written right after the call: the result must be the value
at the call (classic JAX's semantics; jax 0.10's CPU dispatch is asynchronous
and jaxlib shares aligned numpy buffers, so jax.jit itself drifts: rows marked
``reference``).

Each call is queued behind a slow computation on every device, so that a
buffer still shared with the caller would be read after the write. One probe
per route (JAX's call of the program, the hit path's put, the miss path,
donation, a compiled ``lower().compile()``, pjit with and without specs, an
exported function's call in each vintage's spelling) and device count (1, 8),
each over an aligned 64-byte and a 1 MiB row.
"""
from __future__ import annotations

from stress.common import P, Result, Wrong, jax, jnp, np, pmapkit

SECTION = "concurrency"
CALLS = {"quick": 200, "full": 1000}
ROW_FLOATS = (16, 1 << 18)


def _aligned(rows, cols):
    nbytes = rows * cols * 4
    buf = np.empty(nbytes + 64, np.uint8)
    start = (-buf.ctypes.data) % 64
    return buf[start:start + nbytes].view(np.float32).reshape(rows, cols)


def _double(x):
    return x * 2.0


_EXPORT_ROUTES = ("export: call_exported", "export: call", "export: Exported.call",
                  "export: loaded Exported.call")


def _exported(route, devices, cols):
    """An exported function doubling an (n, cols) host array, called by
    ``route``'s spelling (on n > 1 devices a pjit's artifact, under its mesh)."""
    from pmapkit import export as pe
    spec = jax.ShapeDtypeStruct((len(devices), cols), jnp.float32)
    mesh = pmapkit.Mesh(np.array(devices), ("x",))
    fun = _double if len(devices) == 1 else pmapkit.pjit(
        _double, in_axis_resources=P("x"), out_axis_resources=P("x"))
    with mesh:
        exported = pe.export(fun)(spec)
    call = {"export: call_exported": pe.call_exported(exported),
            "export: call": pe.call(exported),
            "export: Exported.call": exported.call,
            "export: loaded Exported.call": pe.deserialize(pe.serialize(exported)).call}[route]

    def on_mesh(x):
        with mesh:
            return call(x)
    return on_mesh


def _callable(route, devices, cols):
    """A function doubling an (n, cols) host array by ``route``."""
    if route.startswith("export"):
        return _exported(route, devices, cols)
    if route == "jax.jit":
        return jax.jit(_double)
    if route.startswith("pjit"):
        if route == "pjit without specs":
            return pmapkit.pjit(_double)
        f = pmapkit.pjit(_double, in_axis_resources=P("x"), out_axis_resources=P("x"))
        mesh = pmapkit.Mesh(np.array(devices), ("x",))

        def on_mesh(x):
            with mesh:
                return f(x)
        return on_mesh
    f = pmapkit.pmap(_double, devices=devices, donate_argnums=0 if route == "donation" else ())
    if route == "aot":
        return f.lower(_aligned(len(devices), cols)).compile()
    if route == "miss":
        def miss(x):
            f.clear_cache()
            return f(x)
        return miss
    return f  # "hit": JAX's call of the program on one device for small rows


def _probe(route, ndev, calls):
    def body():
        devices = jax.devices()[:ndev]
        busy = jax.jit(lambda m: jnp.linalg.matrix_power(m, 24))
        slow = [jax.device_put(np.eye(128, dtype=np.float32) * 0.5, d) for d in devices]
        wrong = {}
        for cols in ROW_FLOATS:
            call = _callable(route, devices, cols)
            x = _aligned(ndev, cols)
            bad = 0
            for _ in range(calls):
                x[...] = 1.0
                for m in slow:
                    busy(m)
                y = call(x)
                x[...] = 99.0
                bad += int(not np.all(np.asarray(y) == 2.0))
            wrong[cols * 4] = bad
        total = sum(wrong.values())
        if total:
            raise Wrong(f"{total} of {calls * len(ROW_FLOATS)} calls computed a value "
                        f"written after the call (by row bytes: {wrong})")
        return Result(f"0 wrong of {calls * len(ROW_FLOATS)} calls", wrong=wrong)
    return body


def register(reg):
    calls = CALLS[reg.mode]
    add = reg.section(SECTION, "host writes", isolated=True, timeout=300)
    for ndev in (1, 8):
        for route in ("hit", "miss", "donation", "aot", "pjit", "pjit without specs",
                      *_EXPORT_ROUTES):
            add(f"{route} on {ndev} device(s)", _probe(route, ndev, calls))
        add(f"jax.jit on {ndev} device(s)", _probe("jax.jit", ndev, calls), reference=True)
