"""pmap bodies run both across processes (under ``pmapkit launch``) and in
one process on all 8 devices, so the two results can be compared slice by
slice. Imported by tests/test_multiprocess_pmap.py and by the script it
launches (which adds this directory to sys.path)."""
import jax
import numpy as np

WIDTH = 3


def global_input(total):
    """The run's input: one row per device of the run."""
    return np.arange(total * total * WIDTH, dtype=np.float32).reshape(total, total, WIDTH) / 7


def cases(total):
    """name -> (pmap keyword arguments, body); ``total`` = global axis size."""
    ring = [(k, (k + 1) % total) for k in range(total)]
    return {
        "psum": ({"axis_name": "i"}, lambda x: jax.lax.psum(x, "i")),
        "pmean_pmax": ({"axis_name": "i"},
                       lambda x: (jax.lax.pmean(x, "i"), jax.lax.pmax(x, "i"))),
        "axis_index": ({"axis_name": "i"},
                       lambda x: jax.lax.axis_index("i") * 100 + x[0, 0].astype(np.int32) * 0),
        "all_gather": ({"axis_name": "i"}, lambda x: jax.lax.all_gather(x[0], "i")),
        "all_gather_tiled": ({"axis_name": "i"},
                             lambda x: jax.lax.all_gather(x, "i", tiled=True)),
        "ppermute_ring": ({"axis_name": "i"}, lambda x: jax.lax.ppermute(x, "i", ring)),
        "psum_scatter": ({"axis_name": "i"},
                         lambda x: jax.lax.psum_scatter(x, "i", tiled=True)),
        "all_to_all": ({"axis_name": "i"},
                       lambda x: jax.lax.all_to_all(x, "i", 0, 0, tiled=True)),
        "unmapped_in_and_out": ({"axis_name": "i", "in_axes": (0, None), "out_axes": (0, None)},
                                lambda x, w: (x * w, jax.lax.psum(x * w, "i").sum())),
        "grad_of_pmean_loss": ({"axis_name": "i"},
                               lambda x: jax.grad(lambda v: jax.lax.pmean((v ** 2).sum(), "i"))(x)),
    }


def call_args(name, x):
    if name == "unmapped_in_and_out":
        return (x, np.float32(0.5))
    return (x,)


def nested(pmap):
    """An outer pmap over the processes' devices holding an inner one of 2."""
    def inner(v):
        return (jax.lax.psum(v, ("i", "j"))
                + (jax.lax.axis_index("i") * 10 + jax.lax.axis_index("j")).astype(v.dtype))
    return pmap(pmap(inner, axis_name="j"), axis_name="i")
