"""``f.lower(...).as_text()`` of a pmap or pjit labels its results as jax
0.4.30 did (the result's path in the output pytree: ``[0]``, ``[1]['s']``,
``""`` for a bare array; ``golden/lowered_labels_jax_0.4.30.json``), and its
arguments with the caller's names (``x``, ``d['a']``) where the text shows
locations (jax 0.10's ``as_text(debug_info=True)``), not ``xs[0]``."""
import json
import pathlib
import re

import jax
import numpy as np
import pytest

import pmapkit

import _lowered_label_cases as cases

GOLDEN = pathlib.Path(__file__).parent / "golden" / "lowered_labels_jax_0.4.30.json"
CLASSIC = json.loads(GOLDEN.read_text())


def _mesh():
    return pmapkit.Mesh(np.array(jax.devices()), ("x",))


def test_the_golden_is_classic_jax():
    assert CLASSIC["jax"] == "0.4.30"


def test_result_labels_are_classic():
    assert cases.run_all(pmapkit.pmap, pmapkit.pjit, _mesh()) == CLASSIC["labels"]


def _argument_locations(text):
    signature = re.search(r"func\.func public @main\((.*?)\)\s*->", text, re.S).group(1)
    return re.findall(r'loc\("([^"]*)"\)', signature)


@pytest.mark.parametrize("api", ["pmap", "pjit"])
def test_arguments_carry_the_callers_names(api):
    x = cases.X
    wrap = getattr(pmapkit, api)
    with _mesh():
        text = wrap(lambda d, e, *, scale: d["a"] * e * scale).lower(
            {"a": x}, x, scale=x).as_text(debug_info=True)
    assert _argument_locations(text) == ["d['a']", "e", "scale"]


def test_a_relabelled_lowering_compiles_and_runs():
    x = cases.X
    lowered = pmapkit.pmap(cases._pair).lower(x, x)
    out = lowered.compile()(x, x)
    np.testing.assert_array_equal(out[0], x + x)
    np.testing.assert_array_equal(out[1]["s"], x * x)
