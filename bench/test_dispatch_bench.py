"""pytest-benchmark suite of the dispatch cases of ``pmapkit.bench``.

Every case x impl is one test (ids like ``pmap_simple_8_devices-pmapkit``),
grouped by case so the impls show side by side::

    pytest bench --benchmark-only -q
    pytest bench --benchmark-only -k 8_devices --pmapkit-rounds 10

pytest-benchmark times wall clock per call (dispatch cases: calls, blocking
every ``BLOCK_EVERY`` calls inside the timing; other cases: call + block).
``extra_info["cpu_us_per_call"]`` is caller-thread CPU time per call
(``time.thread_time``), measured separately with ``_bench.measure`` as
``python -m pmapkit bench`` does; see ``--benchmark-json``. To have
pytest-benchmark's own table in caller-thread CPU time instead, add
``--benchmark-timer time.thread_time``.

Not collected by ``pytest tests`` / plain ``pytest`` (testpaths = tests).
"""
import gc

import pytest

from pmapkit.bench import engine as _bench


def _params():
    params = []
    for case in _bench.load_cases():
        reason = case.unavailable_reason()
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        for impl in case.impls:
            params.append(pytest.param(case.name, impl, marks=marks,
                                       id=f"{case.name}-{impl}"))
    return params


# A case and its _dispatch twin share runners (compiled once), as in the CLI.
_RUNNERS = _bench.RunnerCache()


@pytest.mark.parametrize("case_name,impl", _params())
def test_dispatch(benchmark, request, case_name, impl):
    case = _bench.CASES_BY_NAME[case_name]
    benchmark.group = case.name
    try:
        runner = _RUNNERS.get(case, impl)
    except _bench.Unavailable as exc:
        pytest.skip(str(exc))
    rounds = request.config.getoption("--pmapkit-rounds")
    target = request.config.getoption("--pmapkit-round-seconds")
    if case.mode == "first_call":
        rounds, iterations = min(rounds, 3), 1
    else:
        iterations = _bench.calibrate(runner, target, lo=10, hi=2000)
    gc.collect()
    step = _bench.Stepper(runner)
    with runner.context():
        benchmark.pedantic(step, rounds=rounds, iterations=iterations,
                           warmup_rounds=0 if case.mode == "first_call" else 1)
    step.drain()
    cpu_us, wall_us = _bench.median_measure(
        runner, iterations, 1 if case.mode == "first_call" else 3)
    benchmark.extra_info.update(
        case=case.name, impl=impl, mode=case.mode, devices=case.ndev,
        cpu_us_per_call=cpu_us, wall_us_per_call=wall_us,
        calls_per_measure=iterations)
