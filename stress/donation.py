"""Donation: loops feeding a donated input's result back, and donated inputs
used again (which must raise ``RuntimeError: Array has been deleted``,
never crash). Rows marked ``reference`` run the same misuse on jax.pmap and
jax.jit, for comparison; they are not counted for pmapkit.
"""
from __future__ import annotations

import threading

from stress.common import P, Result, Wrong, jax, jnp, mesh1d, np, pmapkit
from stress.probes import Hang, Unclear

SECTION = "donation"
LOOP = {"quick": 2000, "full": 20000}


def _increment(v):
    return v + 1


def _loop(f, x, n, check_every=97):
    """``x = f(x)`` n times; every donated input must be deleted after its call."""
    not_deleted = 0
    for k in range(n):
        prev = x
        x = f(x)
        if k % check_every == 0:
            not_deleted += sum(not a.is_deleted() for a in jax.tree_util.tree_leaves(prev))
    return x, not_deleted


def _loop_probe(kind, n):
    def body():
        x0 = jnp.zeros((8, 32), jnp.int32)
        if kind == "pmap":
            f = pmapkit.pmap(_increment, donate_argnums=0)
            x = f(x0)  # a pmap output: donation reuses its buffers
            out, kept = _loop(f, x, n - 1)
        elif kind == "pjit":
            f = pmapkit.pjit(_increment, in_axis_resources=P("x"), out_axis_resources=P("x"),
                             donate_argnums=0)
            with mesh1d():
                x = f(x0)
                out, kept = _loop(f, x, n - 1)
        else:  # a pytree, one argument donated and one kept
            f = pmapkit.pmap(lambda p, s: {"w": p["w"] + s, "b": p["b"] * 1}, donate_argnums=0)
            step = jnp.ones((8, 32), jnp.int32)
            params = f({"w": x0, "b": x0 + 7}, step)
            out, kept = _loop(lambda p: f(p, step), params, n - 1)
            if step.is_deleted():
                raise Wrong("the argument that was not donated was deleted")
            if not np.array_equal(np.asarray(out["b"]), np.full((8, 32), 7)):
                raise Wrong(f"the carried leaf 'b' became {np.asarray(out['b']).ravel()[:4]}")
            out = out["w"]
        got = np.asarray(out)
        if not np.array_equal(got, np.full((8, 32), n, np.int32)):
            raise Wrong(f"after {n} donated steps got {got.ravel()[:4].tolist()}, expected {n}")
        note = "" if not kept else f"; {kept} sampled donated inputs were not deleted"
        return Result(f"{n} donated steps, result correct{note}", steps=n, not_deleted=kept)
    return body


def _reuse_probe(kind):
    def body():
        x0 = jnp.zeros((8, 4), jnp.float32)
        if kind in ("pmap", "pmap compiled", "jax.pmap"):
            make = jax.pmap if kind == "jax.pmap" else pmapkit.pmap
            f = make(_increment, donate_argnums=0)
            x = make(_increment)(x0)
            if kind == "pmap compiled":
                f = f.lower(x).compile()
            f(x)
            again = f(x)
        elif kind in ("pjit", "jax.jit"):
            if kind == "jax.jit":
                f = jax.jit(_increment, donate_argnums=0)
                x = jax.jit(_increment)(x0)
                f(x)
                again = f(x)
            else:
                f = pmapkit.pjit(_increment, P("x"), P("x"), donate_argnums=0)
                with mesh1d():
                    x = pmapkit.pjit(_increment, P("x"), P("x"))(x0)
                    f(x)
                    again = f(x)
        else:  # read after donation
            f = pmapkit.pmap(_increment, donate_argnums=0)
            x = pmapkit.pmap(_increment)(x0)
            f(x)
            again = np.asarray(x)
        got = np.asarray(again)
        if x.is_deleted() or not np.allclose(got, 1.0 if kind == "read" else 2.0):
            raise Wrong(f"a donated input used again gave {got.ravel()[:4].tolist()}")
        return Result("the donated input was not consumed; using it again gave the "
                      "right result")
    return body


def _race():
    """Two threads donate the same array at once: one call may consume it,
    the other must raise, and nothing may crash."""
    f = pmapkit.pmap(_increment, donate_argnums=0)
    outcomes = []
    for _ in range(50):
        x = pmapkit.pmap(_increment)(jnp.zeros((8, 64), jnp.float32))
        gate = threading.Barrier(2)
        results = []

        def call():
            gate.wait()
            try:
                results.append(("ok", np.asarray(f(x))))
            except Exception as exc:  # noqa: BLE001 — judged below
                results.append(("error", f"{type(exc).__name__}: {exc}"))
        threads = [threading.Thread(target=call, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            if t.is_alive():
                raise Hang("a racing donated call did not return within 60 s")
        for status, value in results:
            if status == "ok" and not np.allclose(value, 2.0):
                raise Wrong(f"a racing donated call returned {value.ravel()[:4].tolist()}")
            if status == "error" and not (value.startswith("RuntimeError")
                                          and "deleted" in value):
                raise Unclear(f"a racing donated call raised {value[:300]}")
        outcomes.append(tuple(sorted(s for s, _ in results)))
    counts = {o: outcomes.count(o) for o in set(outcomes)}
    return Result(f"50 races: {counts}", races=len(outcomes))


def register(reg):
    n = LOOP[reg.mode]
    add = reg.section(SECTION, "donation", isolated=True, timeout=300)
    add(f"pmap, {n} donated steps", _loop_probe("pmap", n))
    add(f"pjit, {n} donated steps", _loop_probe("pjit", n))
    add(f"pmap, {n} steps donating a pytree", _loop_probe("pytree", n))
    for kind in ("pmap", "pmap compiled", "pjit", "read"):
        what = ("np.asarray of a donated pmap input" if kind == "read"
                else f"{kind}: donated input used again")
        add(what, _reuse_probe(kind), expect=RuntimeError, match="deleted")
    add("two threads donate one array (50 races)", _race)
    ref = reg.section(SECTION, "JAX reference", isolated=True, timeout=120, reference=True)
    for kind in ("jax.pmap", "jax.jit"):
        ref(f"{kind}: donated input used again", _reuse_probe(kind), expect=RuntimeError,
            match="deleted")
