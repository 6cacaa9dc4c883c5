"""Feature benchmark: what ``import pmapkit`` adds to a program's start-up.

``startup_import_pmapkit_new_process_ms``: wall ms of a new Python process
that runs ``import jax`` (the baseline) against one that runs ``import jax;
import pmapkit``, interleaved (a new process per sample, the two alternating
first), bytecode caching on as an installed package has it. Median of
rounds; lower is better. The pmapkit row also gives the difference of the
medians (``on_top_of_jax_ms``) and the median caller CPU ms of ``import
pmapkit`` alone, measured inside a process that imported jax first
(``import_cpu_ms``: less sensitive to a loaded machine than wall time).

pmapkit loads each public name's system on first use (``pmapkit.pmap``,
``pmapkit.pjit``, ``pmapkit.export`` ...); this case is what a program pays
before it uses any. The export loader's share is in
``export_load_first_call_new_process``.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from pmapkit.tools.bench.features import feature_case

_CODES = {"jax": "import jax", "pmapkit": "import jax; import pmapkit"}
_CPU = ("import time, jax; t = time.process_time(); import pmapkit; "
        "print((time.process_time() - t) * 1e3)")


def _env():
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def _wall_ms(code, env):
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    elapsed = (time.perf_counter() - start) * 1e3
    if proc.returncode != 0:
        raise RuntimeError(f"{code!r} failed in a new process:\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout


@feature_case("startup_import_pmapkit_new_process_ms", baseline="jax",
              higher_is_better=False, fresh_processes=True)
def import_new_process(settings):
    env = _env()
    rounds = 2 * settings.get("first_call_rounds", 3) + 1
    for code in _CODES.values():  # warm-up: bytecode written, files cached
        _wall_ms(code, env)
    samples = {impl: [] for impl in _CODES}
    cpu = []
    for k in range(rounds):
        order = list(_CODES.items()) if k % 2 == 0 else list(_CODES.items())[::-1]
        for impl, code in order:
            samples[impl].append(_wall_ms(code, env)[0])
        cpu.append(float(_wall_ms(_CPU, env)[1].split()[-1]))
    med = {impl: statistics.median(v) for impl, v in samples.items()}
    return [{"impl": "jax", "value": med["jax"], "unit": "ms", "rounds": rounds},
            {"impl": "pmapkit", "value": med["pmapkit"], "unit": "ms", "rounds": rounds,
             "on_top_of_jax_ms": med["pmapkit"] - med["jax"],
             "import_cpu_ms": statistics.median(cpu)}]
