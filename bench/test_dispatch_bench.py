"""pytest-benchmark suite of the dispatch cases of ``pmapkit.tools.bench``.

Every case x impl is one test (ids like ``pmap_simple_8_devices-pmapkit``),
grouped by case so the impls show side by side::

    pytest bench --benchmark-only -q
    pytest bench --benchmark-only -k 8_devices --pmapkit-rounds 10

pytest-benchmark times wall clock per call of the test's impl (dispatch cases:
calls, blocking every ``BLOCK_EVERY`` calls inside the timing; other cases:
call + block). Its rounds alternate with the case's other impls: after each
timed round, one round of every impl of the case (the test's own included) is
measured with ``_bench.measure``, as ``python -m pmapkit bench`` does, in an
order that reverses from round to round. So no impl is timed in a block of its
own while the others wait, and each test's ``extra_info`` holds, from those
interleaved rounds, every impl's caller-thread CPU (``time.thread_time``) and
wall µs per call and the test impl's ratios to the others (``cpu`` and
``wall``): compare impls there (``--benchmark-json``); the pytest-benchmark
columns of two impls still come from two tests, one after the other. To have
pytest-benchmark's own table in caller-thread CPU time instead, add
``--benchmark-timer time.thread_time``.

Not collected by ``pytest tests`` / plain ``pytest`` (testpaths = tests).
"""
import gc
import statistics

import pytest

from pmapkit.tools.bench import engine as _bench


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


class _Alternation:
    """pytest-benchmark's ``teardown``: after each timed round of the test's
    impl, one measured round of every runnable impl of the case, in an order
    reversed each time. The test impl's context (a ``with mesh:``) is left
    while the others run, as each enters its own."""

    def __init__(self, runners, own, step, target_s):
        self._runners, self._own, self._step = runners, own, step
        self._calls = {impl: _bench.calibrate(r, target_s, lo=10, hi=2000)
                       for impl, r in runners.items()}
        self.samples = {impl: [] for impl in runners}
        self._open = None
        self._rounds = 0

    def enter_own(self):
        self._open = self._runners[self._own].context()
        self._open.__enter__()

    def leave_own(self):
        self._open.__exit__(None, None, None)
        self._open = None

    def __call__(self, *args, **kwargs):
        self._step.drain()   # the timed impl's last results, before the others run
        self.leave_own()
        try:
            order = list(self._runners.items())
            if self._rounds % 2:
                order.reverse()
            self._rounds += 1
            for impl, runner in order:
                self.samples[impl].append(_bench.measure(runner, self._calls[impl]))
        finally:
            self.enter_own()

    def report(self, skip):
        """``{impl: {"cpu_us", "wall_us", "rounds"}}``: medians per call over
        the measured rounds, the first ``skip`` (warm-up) left out."""
        out = {}
        for impl, samples in self.samples.items():
            kept = samples[skip:] or samples
            out[impl] = {"cpu_us": statistics.median(c for c, _ in kept),
                         "wall_us": statistics.median(w for _, w in kept),
                         "rounds": len(kept), "calls_per_round": self._calls[impl]}
        return out


def _runnable(case):
    runners = {}
    for impl in case.impls:
        try:
            runners[impl] = _RUNNERS.get(case, impl)
        except _bench.Unavailable:
            pass
    return runners


@pytest.mark.parametrize("case_name,impl", _params())
def test_dispatch(benchmark, request, case_name, impl):
    case = _bench.CASES_BY_NAME[case_name]
    benchmark.group = case.name
    try:
        runner = _RUNNERS.get(case, impl)
    except _bench.Unavailable as exc:
        pytest.skip(str(exc))
    runners = _runnable(case)
    rounds = request.config.getoption("--pmapkit-rounds")
    target = request.config.getoption("--pmapkit-round-seconds")
    first_call = case.mode == "first_call"
    if first_call:
        rounds, iterations, warmup = min(rounds, 3), 1, 0
    else:
        iterations, warmup = _bench.calibrate(runner, target, lo=10, hi=2000), 1
    gc.collect()
    step = _bench.Stepper(runner)
    alternation = _Alternation(runners, impl, step, target)
    alternation.enter_own()
    try:
        benchmark.pedantic(step, rounds=rounds, iterations=iterations,
                           warmup_rounds=warmup, teardown=alternation)
    finally:
        alternation.leave_own()
    step.drain()
    interleaved = alternation.report(skip=warmup)
    own = interleaved[impl]
    benchmark.extra_info.update(
        case=case.name, impl=impl, mode=case.mode, devices=case.ndev,
        cpu_us_per_call=own["cpu_us"], wall_us_per_call=own["wall_us"],
        calls_per_measure=own["calls_per_round"], interleaved=interleaved,
        ratios={f"{impl}/{other}": {"cpu": own["cpu_us"] / o["cpu_us"],
                                    "wall": own["wall_us"] / o["wall_us"]}
                for other, o in interleaved.items() if other != impl})
