"""A 2021-style program that prints its jax.random draws (seeded data
shuffling and parameter init, as training scripts of the time logged them).
Under `pmapkit run` the numbers are those the classic releases printed
(tests/golden/random_draws_2021_jax_0.4.30.txt)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

rng = random.PRNGKey(42)
rng, init_rng, data_rng, drop_rng = random.split(rng, 4)
draws = {
    "split": np.asarray(random.split(rng, 3)).tolist(),
    "init": np.asarray(random.normal(init_rng, (2, 3)) * 0.1).round(6).tolist(),
    "uniform": np.asarray(random.uniform(data_rng, (5,))).round(6).tolist(),
    "randint": np.asarray(random.randint(data_rng, (6,), 0, 100)).tolist(),
    "order": np.asarray(random.permutation(data_rng, 8)).tolist(),
    "shuffled": np.asarray(random.shuffle(drop_rng, jnp.arange(10))).tolist(),
    "dropout": np.asarray(random.bernoulli(drop_rng, 0.5, (8,))).tolist(),
    "jit": np.asarray(jax.jit(lambda k: random.normal(k, (4,)))(init_rng)).round(6).tolist(),
    "fold_in": np.asarray(random.fold_in(rng, 7)).tolist(),
}
for name, value in draws.items():
    print(name, json.dumps(value))
