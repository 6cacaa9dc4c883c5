"""pmap across real processes: ``pmapkit launch`` over 127.0.0.1, 2 × 4 and
4 × 2 CPU devices. Each process passes its block of one global input; every
result must equal the same pmap run here, in one process on 8 devices,
sliced to that process's block. Every launch is bounded by a timeout."""
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import pmapkit
from pmapkit.tools import demo

import _multiprocess_cases as mpc

HERE = os.path.dirname(os.path.abspath(__file__))
TOTAL = 8
LAUNCH_TIMEOUT_S = 150
# The children run with JAX's checks on, like this suite.
CHECKS_ENV = {"JAX_ENABLE_CHECKS": "1", "JAX_NUMPY_RANK_PROMOTION": "raise",
              "JAX_LEGACY_PRNG_KEY": "error"}

SCRIPT = textwrap.dedent("""
    import importlib, json, sys
    import numpy as np
    import jax
    import pmapkit
    import pmapkit.distributed
    sys.path.insert(0, sys.argv[1])
    import _multiprocess_cases as mpc

    pmapkit.distributed.initialize()
    out_dir = sys.argv[2]
    me, local, total = jax.process_index(), jax.local_device_count(), jax.device_count()
    block = mpc.global_input(total)[me * local:(me + 1) * local]
    results, facts = {}, {"local": local, "total": total, "compiled": pmapkit.COMPILED}

    pmap_module = importlib.import_module("pmapkit.pmap._pmap")
    misses = [0]
    real_miss = pmap_module._cache_miss
    def counting_miss(*args, **kwargs):
        misses[0] += 1
        return real_miss(*args, **kwargs)
    pmap_module._cache_miss = counting_miss   # before the pmaps below are made

    same_sharding = {}
    for name, (kwargs, body) in mpc.cases(total).items():
        args = mpc.call_args(name, block)
        ours = pmapkit.pmap(body, **kwargs)(*args)
        theirs = jax.pmap(body, **kwargs)(*args)
        for k, (a, b) in enumerate(zip(jax.tree.leaves(ours), jax.tree.leaves(theirs))):
            results[f"{name}/{k}"] = np.asarray(a)
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, err_msg=name)
            same_sharding[f"{name}/{k}"] = (a.sharding == b.sharding, a.shape == b.shape,
                                            a.is_fully_addressable)
    facts["same_as_jax_pmap"] = same_sharding

    # Results fed back: the hit path, no miss, no new compile.
    step = pmapkit.pmap(lambda v: jax.lax.psum(v, "i") / total, axis_name="i")
    x = step(block)
    before = misses[0]
    for _ in range(3):
        x = step(x)
    facts["misses_when_fed_back"] = misses[0] - before
    facts["cache_size"] = step._cache_size
    results["fed_back"] = np.asarray(x)

    if local % 2 == 0:
        results["nested"] = np.asarray(mpc.nested(pmapkit.pmap)(block.reshape(local // 2, 2, *block.shape[1:])))

    # Ahead of time, static arguments and an explicit (global) axis_size.
    summed = pmapkit.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")
    compiled = summed.lower(block).compile()
    facts["compiled_is_jax_stages"] = isinstance(compiled, jax.stages.Compiled)
    results["aot_psum"] = np.asarray(compiled(block))
    results["static_scale"] = np.asarray(
        pmapkit.pmap(lambda v, k: v * k, static_broadcasted_argnums=1)(block, 3))
    results["global_axis_size"] = np.asarray(
        pmapkit.pmap(lambda v: jax.lax.psum(1, "i") + 0 * v[0, 0].astype(np.int32),
                     axis_name="i", axis_size=total)(block))

    # Typed PRNG keys and donated buffers across processes.
    keys = jax.random.split(jax.random.key(me), local)
    draw = lambda k: jax.random.normal(k, (2,))
    facts["keys_equal_jax_pmap"] = bool(np.array_equal(
        np.asarray(pmapkit.pmap(draw)(keys)), np.asarray(jax.pmap(draw)(keys))))
    donating = pmapkit.pmap(lambda v: v + 1, donate_argnums=0)
    first = donating(block)
    second = donating(first)
    facts["donated_input_deleted"] = first.is_deleted()
    results["donated"] = np.asarray(second)

    # devices= naming only process 0's devices: the classic error elsewhere.
    try:
        pmapkit.pmap(lambda v: v + 1, devices=jax.devices()[:local])(block)
        facts["devices_of_process_0"] = "ran"
    except ValueError as err:
        facts["devices_of_process_0"] = str(err)

    # Bad layouts: every process raises alike before any collective (no hang).
    def error_of(fn):
        try:
            fn()
        except ValueError as err:
            return str(err)
        return None
    from jax.sharding import Mesh
    from pmapkit.core.programs import process_local
    devs = jax.devices()
    facts["errors"] = {
        "nested_with_devices": error_of(lambda: pmapkit.pmap(
            pmapkit.pmap(lambda v: v, axis_name="j"), axis_name="i", devices=devs)(
                block.reshape(local // 2, 2, *block.shape[1:]))) if local % 2 == 0 else None,
        "devices_too_short": error_of(lambda: pmapkit.pmap(
            lambda v: v, axis_size=total, devices=devs[:total - 1])(block)),
        "more_devices_than_the_run": error_of(lambda: pmapkit.pmap(
            lambda v: v, axis_size=2 * total)(block)),
        "mesh_of_process_0": error_of(lambda: process_local.local_mesh(
            Mesh(np.array(devs[:local]), ("i",)))),
        # Swap process 0's last device with process 1's first: on 2 x 4 the
        # rows then mix processes and no process's devices form a block.
        "not_a_block": error_of(lambda: process_local.local_mesh(Mesh(np.array(
            devs[:local - 1] + [devs[local], devs[local - 1]] + devs[local + 1:]
        ).reshape(2, total // 2), ("a", "b")))),
    }

    np.savez(f"{out_dir}/rank{me}.npz", **results)
    with open(f"{out_dir}/rank{me}.json", "w") as f:
        json.dump(facts, f)
    pmapkit.distributed.shutdown()
""")


def launch(tmp_path, processes, devices, *command, **extra_env):
    env = dict(os.environ, **CHECKS_ENV, **extra_env)
    env.pop("XLA_FLAGS", None)   # the launcher sets each process's devices
    proc = subprocess.run(
        [sys.executable, "-m", "pmapkit", "launch", "-n", str(processes),
         "--devices-per-process", str(devices), "--timeout", str(LAUNCH_TIMEOUT_S), *command],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S + 30)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def single_process_results():
    """Every case on this process's 8 devices, on the whole global input."""
    assert jax.device_count() == TOTAL
    x = mpc.global_input(TOTAL)
    results = {}
    for name, (kwargs, body) in mpc.cases(TOTAL).items():
        out = pmapkit.pmap(body, **kwargs)(*mpc.call_args(name, x))
        for k, leaf in enumerate(jax.tree.leaves(out)):
            results[f"{name}/{k}"] = np.asarray(leaf)
    results["nested"] = np.asarray(mpc.nested(pmapkit.pmap)(x.reshape(TOTAL // 2, 2, *x.shape[1:])))
    step = pmapkit.pmap(lambda v: jax.lax.psum(v, "i") / TOTAL, axis_name="i")
    y = step(x)
    for _ in range(3):
        y = step(y)
    results["fed_back"] = np.asarray(y)
    results["donated"] = x + 2
    results["aot_psum"] = results["psum/0"]
    results["static_scale"] = x * 3
    results["global_axis_size"] = np.full((TOTAL,), TOTAL, np.int32)
    return results


@pytest.fixture(scope="module", params=[(2, 4, False), (4, 2, False), (2, 4, True)],
                ids=["2x4", "4x2", "2x4-purepython"])
def run(request, tmp_path_factory):
    processes, devices, pure_python = request.param
    out = tmp_path_factory.mktemp(f"mp{processes}x{devices}")
    (out / "script.py").write_text(SCRIPT)
    extra = {"PMAPKIT_PUREPYTHON": "1"} if pure_python else {}
    proc = launch(out, processes, devices, "script.py", HERE, str(out), **extra)
    ranks = []
    for r in range(processes):
        with open(out / f"rank{r}.json") as f:
            facts = json.load(f)
        ranks.append((dict(np.load(out / f"rank{r}.npz")), facts))
    for _, facts in ranks:   # the core under test is the one asked for
        assert facts["compiled"] == (pmapkit.COMPILED and not pure_python)
    return processes, devices, ranks, proc.stdout


def test_collectives_equal_one_process_on_all_devices(run, single_process_results):
    processes, devices, ranks, _ = run
    for rank, (results, facts) in enumerate(ranks):
        assert (facts["local"], facts["total"]) == (devices, TOTAL)
        block = slice(rank * devices, (rank + 1) * devices)
        for key, want in single_process_results.items():
            if key == "nested":
                if devices % 2:
                    continue
                want = want[rank * devices // 2:(rank + 1) * devices // 2]
            elif key.startswith("unmapped_in_and_out/1"):
                pass    # unmapped: every device holds the same total
            else:
                want = want[block]
            np.testing.assert_allclose(results[key], want, rtol=1e-6,
                                       err_msg=f"rank {rank} {key}")


def test_results_are_local_like_jax_pmap(run):
    # Same shape, sharding and addressability as jax.pmap's results.
    _, _, ranks, _ = run
    for results, facts in ranks:
        for key, (same_sharding, same_shape, addressable) in facts["same_as_jax_pmap"].items():
            assert same_sharding and same_shape and addressable, key


def test_results_fed_back_take_the_hit_path(run):
    _, _, ranks, _ = run
    for _, facts in ranks:
        assert facts["misses_when_fed_back"] == 0
        assert facts["cache_size"] == 1


def test_keys_and_donation_across_processes(run):
    _, _, ranks, _ = run
    for _, facts in ranks:
        assert facts["keys_equal_jax_pmap"]
        assert facts["compiled_is_jax_stages"]
        assert facts["donated_input_deleted"]


def test_devices_of_another_process_give_the_classic_error(run):
    processes, devices, ranks, _ = run
    assert ranks[0][1]["devices_of_process_0"] == "ran"
    for _, facts in ranks[1:]:
        assert facts["devices_of_process_0"].startswith(
            "Leading axis size of input to pmapped function must equal the number of "
            f"local devices passed to pmap. Got axis_size={devices}, num_local_devices=0.")


def test_bad_layouts_raise_clear_errors_on_every_process(run):
    processes, devices, ranks, _ = run
    for rank, (_, facts) in enumerate(ranks):
        errors = facts["errors"]
        if devices % 2 == 0:
            assert errors["nested_with_devices"].startswith(
                "pmapkit: nested pmaps cannot run across processes when the outer "
                "pmap is given 'devices'")
        assert "maps an axis of size 8, but its 'devices' argument lists only 7" in \
            errors["devices_too_short"]
        assert (f"requires 16 devices across {processes} processes, but only 8 XLA "
                "devices are available") in errors["more_devices_than_the_run"]
        if rank == 0:
            assert errors["mesh_of_process_0"] is None
        else:
            assert errors["mesh_of_process_0"].startswith(
                f"process {rank} owns none of the devices of the mesh")
        if devices == 4:
            assert errors["not_a_block"].startswith(
                f"the devices of process {rank} do not form a block of the mesh")


def _losses(text):
    losses = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            losses.append((float(parts[1]), float(parts[2])))
    return losses


def test_demo_on_two_processes_reaches_the_one_process_losses(tmp_path):
    ours, _, _ = demo.train(pmapkit.pmap)    # here: one process, 8 devices
    proc = launch(tmp_path, 2, 4, "-m", "pmapkit", "demo")
    for rank in range(2):
        lines = "\n".join(line[len(f"[{rank}] "):] for line in proc.stdout.splitlines()
                          if line.startswith(f"[{rank}] "))
        table = _losses(lines)
        assert len(table) == len(ours), lines
        # To 1e-6 relative: the demo prints 6 decimals, and float32's spacing
        # at the first loss (13.13) is 9.5e-7; the all-reduce across
        # processes sums in another order than one process does.
        np.testing.assert_allclose([a for a, _ in table], ours, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose([b for _, b in table], ours, rtol=1e-6, atol=1e-6)
        assert "pmapkit.pmap and jax.pmap agree" in lines
        assert "process %d of 2, 8 devices in all" % rank in lines


def test_a_process_failing_mid_run_stops_the_run_with_its_traceback(tmp_path):
    # Rank 1 raises while rank 0 waits in a collective for it: the launcher
    # must stop rank 0 too, exit non-zero, and show rank 1's traceback.
    (tmp_path / "fail.py").write_text(textwrap.dedent("""
        import jax, numpy as np, pmapkit, pmapkit.distributed
        pmapkit.distributed.initialize()
        if jax.process_index() == 1:
            raise RuntimeError("rank one gives up")
        pmapkit.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(
            np.ones((jax.local_device_count(), 2), np.float32)).block_until_ready()
    """))
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pmapkit", "launch", "-n", "2", "--timeout", "90", "fail.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    # Rank 1's own failure ends the run, not the launcher's timeout (124).
    assert proc.returncode not in (0, 124), proc.stdout[-3000:]
    out = proc.stdout + proc.stderr
    assert "[1] RuntimeError: rank one gives up" in out
    assert "Traceback" in out
