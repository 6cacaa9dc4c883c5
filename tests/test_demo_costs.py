"""The demo's speed lines: each impl's spread over the rounds (min – median –
max) and the ratio of the medians, said to be what to compare."""
from pmapkit.tools import demo


def test_the_costs_show_the_spread_and_the_ratio_of_medians():
    samples = {"pmapkit.pmap": [60.0, 20.0, 21.0, 22.0, 19.0],
               "jax.pmap": [30.0, 44.0, 40.0, 90.0, 41.0],
               "jax.jit": [10.0, 11.0, 12.0, 13.0, 14.0]}
    lines = demo.format_costs(samples, steps=100).splitlines()
    assert lines[0].startswith("per training step, caller-thread CPU µs over 5 rounds of 100")
    ours, theirs, jit = lines[1:4]
    assert ours.split() == ["pmapkit.pmap", "19.0", "–", "21.0", "–", "60.0", "µs"]
    # 41 / 21 and 21 / 12: medians, not means (pmapkit's mean is 28.4) nor minima
    assert theirs.split()[:7] == ["jax.pmap", "30.0", "–", "41.0", "–", "90.0", "µs"]
    assert theirs.endswith("pmapkit.pmap is 1.95x faster")
    assert jit.endswith("pmapkit.pmap is 1.75x slower")
    assert "Compare the ratios" in lines[4]


def test_step_costs_gives_one_value_per_round():
    samples = demo.step_costs(rounds=3, steps=10)
    assert sorted(samples) == ["jax.jit", "jax.pmap", "pmapkit.pmap"]
    assert all(len(v) == 3 and all(x > 0 for x in v) for v in samples.values())
