"""Instructions per call of the hit path's rows (issues 50, 58), side by side
with JAX, counted by callgrind: steady on a loaded machine, where CPU time is not.

Each row runs in one new process under ``valgrind --tool=callgrind
--separate-threads=yes``: the child builds and warms every impl of the row,
then, per impl, marks (``callgrind_control --dump`` on itself: callgrind
dumps every thread's counters, and the child waits for it), runs ``n1``
calls, marks, runs ``n2`` calls, marks. A call's cost is ``(I(n2) - I(n1)) / (n2 - n1)``: the loop's
set-up and the markers cancel. Two counts per row: the caller's thread
(the main thread) and every thread of the process together (XLA's worker
threads, callbacks: what process CPU sees). Rows whose cost is once per
process (``export_first_call``) run one process per impl and count the
whole of the import, load and first call (``n1 = 0``, ``n2 = 1``).

The build measured is the one users run: the pmapkit the interpreter imports
from a neutral directory (``python -P``: not the checkout the script sits
in), or the tree ``--pmapkit-path`` names (an A/B against another build).
Each child reports which it imported, and whether compiled; an uncompiled
(pure-Python) build is refused unless ``--allow-pure`` (then every line says
so): its counts say nothing of the compiled hit path.

The layer: per row and impl, the caller's instructions per call minus those
of the runtime's execute (the inclusive count of
``xla::ifrt::PjRtLoadedExecutable::Execute``, the one entry every impl's
call reaches, jaxlib 0.4.30's too): what the impl itself adds around running
the program (signing, finding the entry, feeding it, making the results).

    python bench/callgrind_rows.py                       # every row
    python bench/callgrind_rows.py numpy_1dev scalar_1dev
    python bench/callgrind_rows.py --list
    python bench/callgrind_rows.py array_1dev --classic-python /work/venv-jax0430/bin/python
    python bench/callgrind_rows.py array_1dev --pmapkit-path /tmp/main-build

``--classic-python``: the interpreter of a venv with jax/jaxlib 0.4.30: the
classic C++ ``jax.pmap`` joins each row it applies to (``CLASSIC_ROWS``).
``--python``: the interpreter of every child (another venv: only the rows'
JAX impls run there). ``--json PATH`` writes the counts.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

_FORCE_8 = "--xla_force_host_platform_device_count=8"

# row -> (impls, (n1, n2), what it measures)
ROWS = {
    "array_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                   "cached 1-device pmap fed a device array (the hit path)"),
    "array_8dev": (("pmapkit", "jax.jit"), (400, 1200),
                   "cached 8-device pmap fed a device array (the hit path)"),
    "numpy_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                   "a (1, 4) float32 numpy input into a 1-device pmap"),
    "numpy_unaligned_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                             "the (1, 4) numpy input 16 bytes off a 64-byte boundary"),
    "scalar_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                    "a device array and a Python float into a 1-device pmap"),
    "numpy_8dev": (("pmapkit", "jax.jit"), (400, 1200),
                   "an (8, 4) float32 numpy input into an 8-device pmap"),
    "numpy_4mib_1dev": (("pmapkit", "jax.jit", "jax.pmap"), (10, 30),
                        "a (1, 2**20) float32 numpy input (4 MiB), each call blocking"),
    "numpy_4mib_8dev": (("pmapkit", "jax.jit", "jax.pmap"), (4, 12),
                        "an (8, 2**20) float32 numpy input (4 MiB a device), blocking"),
    "hcb_call_8dev": (("pmapkit", "jax.pure_callback"), (100, 300),
                      "host_callback.call in an 8-device jax.jit, blocking"),
    "id_tap_8dev": (("pmapkit", "jax.debug.callback"), (100, 300),
                    "id_tap in an 8-device jax.jit, blocking"),
    "fresh_8dev": (("pmapkit", "jax.pmap"), (100, 300),
                   "pmap(f, axis_name='i') built afresh per call, 8 devices, blocking"),
    "export_first_call": (("pmapkit", "jax.export"), (0, 1),
                          "import + deserialize + first call of an exported 10-layer MLP"),
    "pjit_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                  "cached 1-device pjit fed a device array"),
    "numpy_beside_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                          "a device array and a (1, 4) numpy input into a 1-device pmap"),
    "alternating_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                         "two cached signatures called in turn (compare with one_signature_1dev)"),
    "one_signature_1dev": (("pmapkit", "jax.jit"), (1000, 3000),
                           "alternating_1dev's first input alone, called again and again"),
}

#: Rows the classic C++ ``jax.pmap`` of jax 0.4.30 runs too (``--classic-python``).
CLASSIC_ROWS = ("array_1dev", "array_8dev", "numpy_1dev", "numpy_8dev", "scalar_1dev",
                "numpy_beside_1dev", "alternating_1dev", "one_signature_1dev", "fresh_8dev")
CLASSIC = "jax.pmap 0.4.30"
#: The runtime's execute, reached by every impl's call (see the layer above).
EXECUTE_SYMBOL = "xla::ifrt::PjRtLoadedExecutable::Execute("


# -- the child: builds a row's impls, runs the marked loops ----------------------
def _add_one(a):
    return a + 1


def _scaled(a, n):
    return a * n


def _scale_shift(x):
    return x * 2.0 + 1.0


def _aligned(rows, cols, offset=0):
    """A float32 (rows, cols) array whose data starts ``offset`` bytes past
    a 64-byte boundary."""
    import numpy as np
    nbytes = rows * cols * 4
    buf = np.empty(nbytes + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    return buf[start:start + nbytes].view(np.float32).reshape(rows, cols)


def _build(row, impl):
    """``(call, block)``: one call of the row's impl, and whether the loop
    waits for each call's result."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    n = 1 if row.endswith("_1dev") else 8
    devices = jax.devices()[:n]
    sharding = NamedSharding(Mesh(np.array(devices), ("i",)), P("i"))

    def pmapkit_pmap(fun, **kw):
        import pmapkit
        return pmapkit.pmap(fun, axis_name="i", devices=devices, **kw)

    if row.startswith(("array_", "numpy_")) and row != "numpy_beside_1dev":
        # (numpy_beside_1dev is below: it once fell in here, measuring
        # numpy_1dev under its name)
        # 64-byte aligned, as numpy's large allocations (and many small
        # ones) are: jaxlib then takes the array without a copy, jax.jit's
        # cheapest put (an unaligned one costs it a copy: its count would
        # change with where the allocator put the array; the unaligned row
        # places it 16 bytes off, to measure that case steadily).
        host = _aligned(n, (1 << 20) if "4mib" in row else 4,
                        16 if "unaligned" in row else 0)
        host[...] = np.arange(host.size, dtype=np.float32).reshape(host.shape)
        if impl == "pmapkit":
            fn = pmapkit_pmap(_add_one)
        elif impl == "jax.pmap":
            fn = jax.pmap(_add_one, axis_name="i", devices=devices)
        else:
            fn = jax.jit(_add_one, in_shardings=sharding, out_shardings=sharding)
        x = fn(host) if row.startswith("array_") else host
        return (lambda: fn(x)), "4mib" in row
    if row == "scalar_1dev":
        x = jax.device_put(np.arange(4, dtype=np.float32).reshape(1, 4), sharding)
        if impl == "pmapkit":
            fn = pmapkit_pmap(_scaled, in_axes=(0, None))
        elif impl == "jax.pmap":
            fn = jax.pmap(_scaled, axis_name="i", devices=devices, in_axes=(0, None))
        else:
            fn = jax.jit(_scaled)
        return (lambda: fn(x, 0.5)), False
    if row == "numpy_beside_1dev":
        x = jax.device_put(np.arange(4, dtype=np.float32).reshape(1, 4), sharding)
        host = _aligned(1, 4)
        host[...] = 1.0
        if impl == "pmapkit":
            fn = pmapkit_pmap(_scaled)
        elif impl == "jax.pmap":
            fn = jax.pmap(_scaled, axis_name="i", devices=devices)
        else:
            fn = jax.jit(_scaled, in_shardings=sharding, out_shardings=sharding)
        return (lambda: fn(x, host)), False
    if row == "pjit_1dev":
        x = jax.device_put(np.arange(4, dtype=np.float32).reshape(1, 4), sharding)
        if impl == "pmapkit":
            import pmapkit
            fn = pmapkit.pjit(_add_one, in_shardings=sharding, out_shardings=sharding)
        else:
            fn = jax.jit(_add_one, in_shardings=sharding, out_shardings=sharding)
        return (lambda: fn(x)), False
    if row in ("alternating_1dev", "one_signature_1dev"):
        # The same wrapper and inputs in both rows (arrays put by
        # jax.device_put, both signatures compiled): the rows differ only by
        # the alternation, so their ratio is its cost.
        a = jax.device_put(np.arange(4, dtype=np.float32).reshape(1, 4), sharding)
        b = jax.device_put(np.arange(8, dtype=np.float32).reshape(1, 8), sharding)
        if impl == "pmapkit":
            fn = pmapkit_pmap(_add_one)
        elif impl == "jax.pmap":
            fn = jax.pmap(_add_one, axis_name="i", devices=devices)
        else:
            fn = jax.jit(_add_one, in_shardings=sharding, out_shardings=sharding)
        pair = [a, b] if row == "alternating_1dev" else [a, a]
        turn = [0]

        def alternate():
            turn[0] ^= 1
            return fn(pair[turn[0]])
        fn(a)
        fn(b)
        return alternate, False
    if row in ("hcb_call_8dev", "id_tap_8dev"):
        mesh = Mesh(np.array(devices), ("d",))
        x = jax.device_put(np.zeros(4 * n, np.float32), NamedSharding(mesh, P("d")))
        sds = jax.ShapeDtypeStruct(x.shape, x.dtype)

        def echo(a):
            return a

        def on_tap(arg, transforms):
            pass

        def on_debug(a):
            pass
        if impl == "pmapkit":
            from pmapkit import host_callback as hcb
            if row == "hcb_call_8dev":
                fn = jax.jit(lambda v: hcb.call(echo, v, result_shape=v) + 1.0)
            else:
                fn = jax.jit(lambda v: hcb.id_tap(on_tap, v) + 1.0)
        elif impl == "jax.pure_callback":
            fn = jax.jit(lambda v: jax.pure_callback(echo, sds, v) + 1.0)
        else:
            def debug_body(v):
                jax.debug.callback(on_debug, v)
                return v + 1.0
            fn = jax.jit(debug_body)
        return (lambda: fn(x)), True
    if row == "fresh_8dev":
        host = np.arange(n * 16, dtype=np.float32).reshape(n, 16)
        if impl == "pmapkit":
            import pmapkit
            pm = pmapkit.pmap
        else:
            pm = jax.pmap
        x = pm(_scale_shift, axis_name="i", devices=devices)(host)
        return (lambda: pm(_scale_shift, axis_name="i", devices=devices)(x)), True
    raise ValueError(f"unknown row {row!r}")


def _mark():
    """Callgrind dumps every thread's counters here (and the caller waits)."""
    subprocess.run(["callgrind_control", "--dump", str(os.getpid())],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def _say_build():
    """One line for the parent: which pmapkit this child imported, and
    whether its hit path is compiled (none in a venv without pmapkit)."""
    try:
        import pmapkit
    except ImportError:
        print("PMAPKIT-BUILD none", flush=True)
        return
    print(f"PMAPKIT-BUILD {os.path.dirname(os.path.abspath(pmapkit.__file__))} "
          f"compiled={pmapkit.COMPILED}", flush=True)


def _child_loops(row, impls, n1, n2):
    import jax
    _say_build()
    built = [_build(row, impl) for impl in impls]
    for call, _ in built:  # warm: compiled, every cache filled
        for _ in range(3):
            jax.block_until_ready(call())
    for call, block in built:
        for n in (n1, n2):
            _mark()
            out = None
            if block:
                for _ in range(n):
                    jax.block_until_ready(call())
            else:
                for _ in range(n):
                    out = call()
                jax.block_until_ready(out)
    _mark()


_EXPORT_BLOB = "callgrind_export.bin"


def _write_export_blobs(folder):
    """The artifact each impl loads (written once, outside valgrind)."""
    import jax
    import jax.numpy as jnp
    from jax import export as jax_export

    from pmapkit import export as pe
    from pmapkit.tools.bench.features_export import BATCH, WIDTH, _mlp
    spec = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32)
    with open(os.path.join(folder, "jax.export"), "wb") as f:
        f.write(jax_export.export(jax.jit(_mlp(1.0)))(spec).serialize())
    with open(os.path.join(folder, "pmapkit"), "wb") as f:
        f.write(pe.serialize(pe.export(_mlp(1.0))(spec)))


def _child_export(impl, path):
    import jax
    import numpy as np
    import scipy.linalg  # noqa: F401 - JAX's LAPACK setup imports it in either first call
    with open(path, "rb") as f:
        blob = f.read()
    x = np.ones((8, 256), np.float32)
    jax.devices()
    if impl == "pmapkit":
        _say_build()
    _mark()
    _mark()  # n1 = 0: an empty part
    if impl == "jax.export":
        from jax import export as loader
    else:
        from pmapkit import export as loader
    jax.block_until_ready(loader.deserialize(blob).call(x))
    _mark()


# -- the parent: valgrind per process, parts summed per thread -------------------
def _execute_in(path):
    """The inclusive instructions of the runtime's execute in one dump."""
    proc = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                           "--auto=no", path], capture_output=True, text=True, timeout=600)
    total = 0
    for line in proc.stdout.splitlines():
        if EXECUTE_SYMBOL in line:
            total = max(total, int(line.split()[0].replace(",", "")))
    return total


def _parts(folder):
    """``{part: {thread: instructions}}`` of the callgrind dumps in ``folder``;
    thread 1's execute count under ``("execute", 1)``."""
    parts = {}
    for path in glob.glob(os.path.join(folder, "callgrind.out.*")):
        part = thread = total = None
        with open(path) as f:
            for line in f:
                if line.startswith("part:"):
                    part = int(line.split()[1])
                elif line.startswith("thread:"):
                    thread = int(line.split()[1])
                elif line.startswith("summary:"):
                    total = int(line.split()[1])
        if part is None:
            m = re.search(r"\.(\d+)-\d+$", path)
            part = int(m.group(1)) if m else 0
        if total is not None:
            parts.setdefault(part, {})[thread] = total
            if thread == 1:
                parts[part][("execute", 1)] = _execute_in(path)
    return parts


def _valgrind(python, args, env):
    """``(parts, build)``: the dumps' counts, and the child's build line."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
               f"--callgrind-out-file={tmp}/callgrind.out.%p",
               python, "-P", os.path.abspath(__file__), *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600,
                              cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-4000:]}")
        builds = [line.split(" ", 1)[1] for line in proc.stdout.splitlines()
                  if line.startswith("PMAPKIT-BUILD ")]
        return _parts(tmp), (builds[-1] if builds else "none")


def _per_call(parts, first, n1, n2):
    """(main thread, all threads, layer) instructions per call from parts
    ``first`` (n1 calls) and ``first + 1`` (n2 calls); the layer: the main
    thread's less the runtime's execute."""
    a, b = parts.get(first, {}), parts.get(first + 1, {})

    def threads(part):
        return sum(v for k, v in part.items() if not isinstance(k, tuple))
    main = (b.get(1, 0) - a.get(1, 0)) / (n2 - n1)
    every = (threads(b) - threads(a)) / (n2 - n1)
    execute = (b.get(("execute", 1), 0) - a.get(("execute", 1), 0)) / (n2 - n1)
    return main, every, main - execute


class PureBuildError(RuntimeError):
    """The pmapkit measured is not compiled (its counts would mislead)."""


def _check_build(build, allow_pure):
    if "compiled=False" in build and not allow_pure:
        raise PureBuildError(
            f"refused: the pmapkit measured ({build.split()[0]}) runs its pure-Python "
            "build, not the compiled hit path users run. Build it (`python setup.py "
            "build_ext --inplace` in a checkout, or install the wheel), name a built "
            "tree with --pmapkit-path, or pass --allow-pure to count it anyway.")


def measure(row, python, impls=None, pmapkit_path=None, allow_pure=False,
            classic_python=None, calls=None):
    """``{impl: (main thread, all threads, layer)}`` of ``row``, and the
    build measured (``"<folder> compiled=<bool>"``); ``calls``: ``(n1, n2)``
    instead of the row's."""
    known, (n1, n2), _ = ROWS[row]
    if calls is not None and row != "export_first_call":
        n1, n2 = calls
    impls = tuple(impls or known)
    if classic_python and row in CLASSIC_ROWS:
        classic = _measure_classic(row, classic_python, n1, n2)
    else:
        classic = None
    out, build = _measure(row, python, impls, n1, n2, pmapkit_path, allow_pure)
    if classic is not None:
        out[CLASSIC] = classic
    return out, build


def _env(pmapkit_path):
    env = dict(os.environ)
    env["XLA_FLAGS"] = _FORCE_8
    env["JAX_PLATFORMS"] = "cpu"
    # An installed package has its bytecode: the warm-up process writes it
    # (without it every import in the counted part would compile source).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPATH", None)
    env.pop("PMAPKIT_PUREPYTHON", None)
    if pmapkit_path:
        env["PYTHONPATH"] = os.path.abspath(pmapkit_path)
    return env


def _measure_classic(row, python, n1, n2):
    env = _env(None)
    parts, _ = _valgrind(python, ["--child", row, "jax.pmap", str(n1), str(n2)], env)
    return _per_call(parts, 2, n1, n2)


def _measure(row, python, impls, n1, n2, pmapkit_path, allow_pure):
    env = _env(pmapkit_path)
    out = {}
    build = "none"
    if row == "export_first_call":
        env.pop("XLA_FLAGS")
        with tempfile.TemporaryDirectory() as folder:
            subprocess.run([python, "-P", os.path.abspath(__file__), "--write-export", folder],
                           env=env, check=True, timeout=600)
            for impl in impls:
                path = os.path.join(folder, impl)
                # bytecode written, files cached
                subprocess.run([python, "-P", os.path.abspath(__file__), "--child-export",
                                impl, path], env=env, check=True, timeout=600,
                               capture_output=True, cwd=folder)
                parts, said = _valgrind(python, ["--child-export", impl, path], env)
                if impl == "pmapkit":
                    build = said
                    _check_build(build, allow_pure)
                out[impl] = _per_call(parts, 2, n1, n2 if n2 else 1)
                # part 2 is empty (n1 = 0), part 3 the load and first call
        return out, build
    parts, build = _valgrind(python, ["--child", row, ",".join(impls), str(n1), str(n2)], env)
    if "pmapkit" in impls:
        _check_build(build, allow_pure)
    for k, impl in enumerate(impls):
        out[impl] = _per_call(parts, 2 + 2 * k, n1, n2)
    return out, build


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--impls", default=None, help="comma-separated impls of the rows")
    parser.add_argument("--json", default=None)
    parser.add_argument("--pmapkit-path", default=os.environ.get("PMAPKIT_PATH"),
                        help="measure the pmapkit in this folder (default: the installed one)")
    parser.add_argument("--classic-python", default=None,
                        help="a jax 0.4.30 venv's python: its C++ jax.pmap joins the rows")
    parser.add_argument("--calls", default=None,
                        help="N1,N2: the two loop lengths instead of each row's")
    parser.add_argument("--allow-pure", action="store_true",
                        help="count an uncompiled pmapkit too (each line says so)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--child-export", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--write-export", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        row, impls, n1, n2 = args.child
        return _child_loops(row, impls.split(","), int(n1), int(n2))
    if args.child_export:
        return _child_export(*args.child_export)
    if args.write_export:
        return _write_export_blobs(args.write_export)
    if args.list:
        for name, (impls, counts, what) in ROWS.items():
            print(f"{name:18s} {what} ({' vs '.join(impls)}; calls {counts[0]} and {counts[1]})")
        return None
    results = {}
    impls = args.impls.split(",") if args.impls else None
    for row in args.rows or list(ROWS):
        try:
            calls = tuple(int(n) for n in args.calls.split(",")) if args.calls else None
            got, build = measure(row, args.python, impls, args.pmapkit_path,
                                 args.allow_pure, args.classic_python, calls)
        except PureBuildError as exc:
            sys.exit(f"callgrind_rows: {exc}")
        results[row] = {"build": build, **got}
        pure = "  [PURE-PYTHON BUILD]" if "compiled=False" in build else ""
        base = got.get(next(iter(i for i in got if i not in ("pmapkit", CLASSIC)), None))
        for impl, (main_i, every, layer) in got.items():
            ratio = ""
            if impl == "pmapkit" and base:
                ratio = f"  {main_i / base[0]:.3f}x / {every / base[1]:.3f}x"
            print(f"{row:18s} {impl:20s} main thread {main_i:12,.0f}   "
                  f"all threads {every:12,.0f}   layer {layer:10,.0f}{ratio}"
                  f"{pure if impl == 'pmapkit' else ''}", flush=True)
        print(f"{row:18s} pmapkit measured: {build}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return None


if __name__ == "__main__":
    main()
