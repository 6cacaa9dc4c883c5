"""``f.lower(...).as_text()`` of pmaps and pjits: how the module labels its
results (``jax.result_info``). ``golden/lowered_labels_classic.py`` records
jax 0.4.30's labels (``golden/lowered_labels_jax_0.4.30.json``);
``test_lowered_labels.py`` holds pmapkit's to them."""
import re

import numpy as np
from jax.sharding import PartitionSpec as P

X = np.ones((8, 3), np.float32)


def _pair(x, y):
    return x + y, {"s": x * y}


def _scaled(x, *, scale):
    return x * scale


def _cases(pmap, pjit):
    return {
        "pmap tuple and dict": lambda: pmap(_pair).lower(X, X),
        "pmap one array": lambda: pmap(lambda a: a * 2).lower(X),
        "pmap keyword": lambda: pmap(_scaled).lower(X, scale=X),
        "pmap dict in, dict out": lambda: pmap(lambda d, e: {"o": d["a"] * e,
                                                             "p": [e, e]}).lower({"a": X}, X),
        "pmap static": lambda: pmap(lambda a, n: a * n,
                                    static_broadcasted_argnums=1).lower(X, 2.0),
        "pjit tuple and dict": lambda: pjit(_pair, in_shardings=P("x"),
                                            out_shardings=P("x")).lower(X, X),
        "pjit one array": lambda: pjit(lambda a: a * 2, in_shardings=P("x")).lower(X),
        "pjit keyword": lambda: pjit(_scaled).lower(X, scale=X),
        "pjit nested out": lambda: pjit(lambda d: ({"o": d["a"]}, (d["a"], d["a"]))).lower({"a": X}),
    }


def result_labels(text):
    """The ``jax.result_info`` of each result of the module's main."""
    signature = re.search(r"func\.func public @main\((.*?)\)\s*->\s*\((.*?)\)\s*\{",
                          text, re.S)
    return re.findall(r'jax\.result_info = "([^"]*)"', signature.group(2))


def run_all(pmap, pjit, mesh):
    out = {}
    for name, lower in _cases(pmap, pjit).items():
        with mesh:
            out[name] = result_labels(lower().as_text())
    return out
