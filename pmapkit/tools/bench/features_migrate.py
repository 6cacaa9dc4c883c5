"""Feature cases of ``pmapkit migrate``: how fast the migrated code runs.

Rows are labelled by what ran: ``jax.pmap`` (JAX 0.10's own, the baseline),
``pmapkit`` (pmapkit's pmap: the original under ``pmapkit run --route-pmap``,
or ``pmapkit.pmap``) and ``migrated`` (the file ``pmapkit migrate`` writes, on
plain jax with no pmapkit imported: each pmap translated at its site into
``jax.jit`` of ``jax.shard_map``). A ``migrated`` row carries
``migrated/pmapkit``, its value over the ``pmapkit`` row's.

``migrate_inline_pmaps_script_8_devices``: wall µs per iteration of
``inline_pmaps_script.py`` the three ways, side by side in alternating rounds
of fresh processes; the process CPU µs per iteration (every thread) rides
along in ``cpu_us``. Its lambda made anew each iteration is traced and
compiled anew by the migrated file, as by ``jax.pmap`` (a new function object
may read new values; ``pmapkit run`` reuses the program only when what was
lowered is the same).

``migrate_pmap_per_call_8_devices``: caller-thread CPU µs per cached call of
one pmapped function (8 devices, blocking each call) for ``jax.pmap``,
``pmapkit.pmap`` and what ``pmapkit migrate`` writes for ``jax.pmap(f)`` (run as
written: ``jax.jit(jax.shard_map(_per_device(f), ...))``), and, as
``migrated, mesh follows the argument``, what it writes in a file that maps a
size written as a number (``jax.jit(_first_devices(jax.shard_map, ...))``),
interleaved in one process.

``migrate_nested_pmap_per_call_8_devices``: the same for a pmap-decorated def
called in a pmapped body (4 × 2 devices; JAX 0.10's ``jax.pmap`` cannot nest,
so ``pmapkit.pmap`` is the baseline) and its migrated shard_map in a
shard_map.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import jax
import numpy as np

import pmapkit
from pmapkit.tools.bench.features import feature_case, interleaved_cpu_us
from pmapkit.tools.bench.features_wrappers import SCRIPT, alternating_rows
from pmapkit.tools.migrate import migrate_source


@feature_case("migrate_inline_pmaps_script_8_devices", baseline="jax.pmap",
              higher_is_better=False, fresh_processes=True)
def inline_pmaps_script_migrated(settings):
    with open(SCRIPT) as f:
        migrated_source, report = migrate_source(f.read(), SCRIPT)
    if report.left or report.kept:
        raise RuntimeError(f"the script did not migrate fully:\n{report.format()}")
    with tempfile.TemporaryDirectory(prefix="pmapkit-bench-migrate-") as folder:
        migrated = os.path.join(folder, "inline_pmaps_script_migrated.py")
        with open(migrated, "w") as f:
            f.write(migrated_source)
        commands = {"jax.pmap": [sys.executable, SCRIPT],
                    "pmapkit": [sys.executable, "-m", "pmapkit", "run", "--route-pmap", SCRIPT],
                    "migrated": [sys.executable, "-P", migrated]}
        return _versus_pmapkit(alternating_rows(commands, settings, what={
            "jax.pmap": "original script, jax.pmap",
            "pmapkit": "original script, pmapkit run --route-pmap",
            "migrated": "migrated file, plain jax"}))


def _versus_pmapkit(rows):
    """``rows`` with ``migrated/pmapkit`` on the migrated row."""
    by_impl = {row["impl"]: row for row in rows}
    for name, row in by_impl.items():
        if name.startswith("migrated"):
            row["migrated/pmapkit"] = row["value"] / by_impl["pmapkit"]["value"]
    return rows


def _migrated(classic, names):
    """The names ``classic`` (source) binds, after ``pmapkit migrate``, its output run."""
    source, report = migrate_source(classic)
    if report.left or report.kept:
        raise RuntimeError(f"the bench source did not migrate:\n{report.format()}")
    namespace = dict(names)
    exec(compile(source, "<pmapkit migrate>", "exec"), namespace)
    return namespace


def _migrated_pmap(fun):
    """``jax.pmap(fun)`` as ``pmapkit migrate`` translates it, the migrated source run."""
    return _migrated("import jax\n\nmapped = jax.pmap(fun)\n", {"fun": fun})["mapped"]


def _migrated_pmap_following_sizes(fun):
    """The same in a file that maps a size written as a number (``_first_devices``)."""
    return _migrated("import jax\nimport jax.numpy as jnp\n\nmapped = jax.pmap(fun)\n"
                     "first = mapped(jnp.zeros((8, 128)))\n", {"fun": fun})["mapped"]


def _add_one(x):
    return x + 1


@feature_case("migrate_pmap_per_call_8_devices", baseline="jax.pmap", higher_is_better=False)
def pmap_per_call_migrated(settings):
    impls = {"jax.pmap": jax.pmap(_add_one), "pmapkit": pmapkit.pmap(_add_one),
             "migrated": _migrated_pmap(_add_one),
             "migrated, mesh follows the argument": _migrated_pmap_following_sizes(_add_one)}
    return _per_call_rows(impls, np.zeros((8, 128), np.float32), settings, "jax.pmap")


def _per_call_rows(impls, x, settings, baseline):
    """Caller-CPU µs per blocking call of each impl, each fed its own output for
    ``x`` (inputs placed as each wants), interleaved in one process."""
    args = {name: fn(x) for name, fn in impls.items()}

    def cpu_us(fn, calls):
        arg = next(args[name] for name, f in impls.items() if f is fn)
        start = time.thread_time()
        for _ in range(calls):
            jax.block_until_ready(fn(arg))
        return (time.thread_time() - start) / calls * 1e6

    return _versus_pmapkit(interleaved_cpu_us(impls, cpu_us, settings, baseline, warmup=20,
                                              max_calls=2000))


_NESTED = """\
import jax
import jax.numpy as jnp
from jax import pmap


@pmap
def outer(x):
    y = jnp.sin(x)

    @pmap
    def inner(z):
        return jnp.cos(z) * y.sum()
    return inner(x)
"""


@feature_case("migrate_nested_pmap_per_call_8_devices", baseline="pmapkit",
              higher_is_better=False)
def nested_pmap_per_call_migrated(settings):
    classic = {}
    exec(compile(_NESTED.replace("from jax import pmap", "from pmapkit import pmap"),
                 "<classic>", "exec"), classic)
    impls = {"pmapkit": classic["outer"], "migrated": _migrated(_NESTED, {})["outer"]}
    return _per_call_rows(impls, np.ones((4, 2), np.float32), settings, "pmapkit")
