"""A 2021-style data pipeline: a spawn Pool whose workers use classic names
(jax.tree_multimap, removed in 0.3.16). Written for pmapkit (no one public
program): the pattern of the real programs that hung under pmapkit run before
the classic layer reached worker processes (issue 55)."""
import multiprocessing

import jax
import jax.numpy as jnp


def preprocess(seed):
    batch = {"x": jnp.arange(3.0) + seed, "y": jnp.ones(3)}
    scaled = jax.tree_multimap(lambda a, b: a * b, batch, {"x": 2.0, "y": 3.0})
    return float(scaled["x"].sum() + scaled["y"].sum())


if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        print("batches", pool.map(preprocess, range(4)))
