"""Issue 48: a refusal never says "no public replacement" of a name whose
object JAX still exports. Every refusal of the table (the census records
refused, ``REFUSED_NAMES``, ``REFUSED_REAL_USE``) is looked up on this JAX:
where JAX holds the classic object now (``names.PRIVATE_HOMES``), and whether
a public JAX module exports that very object (``census_public_homes``)."""
import importlib.util
import subprocess
import sys

from pmapkit.legacy import census, census_public_homes
from pmapkit.legacy import names


def _refusals():
    census_refused = [r for r in names.census_records().values()
                      if r.make is None and not r.served_by]
    return census_refused + list(names.REFUSED_NAMES) + list(names.REFUSED_REAL_USE)


def test_no_refusal_says_no_public_replacement_of_an_exported_object():
    index = census_public_homes.public_index()
    wrong = {}
    for record in _refusals():
        text = str(record.error())
        if "no public replacement" not in text:
            continue
        public = census_public_homes.exported_as(record.name, index)
        if public is not None:
            wrong[record.name] = public
    assert not wrong, dict(list(wrong.items())[:20])


def test_the_public_homes_data_is_current():
    kept = census.public_homes()
    if importlib.util.find_spec("absl") is None:
        # JAX's test utilities import absl-py: without it jax.test_util's
        # names cannot be looked up here (the data was written with it).
        kept = {k: v for k, v in kept.items() if not k.startswith("jax.test_util.")}
    assert kept == census_public_homes.homes()


def test_the_rule_catches_the_issue_s_example():
    """``from jax import ShapedArray`` said "no public replacement" while
    jax.core.ShapedArray is that class: the lookup finds it."""
    index = census_public_homes.public_index()
    assert census_public_homes.exported_as("jax.ShapedArray", index) == "jax.core.ShapedArray"
    assert census_public_homes.exported_as(
        "jax.interpreters.ad.Tracer", index) == "jax.core.Tracer"
    refused = names.Removed("jax.interpreters.ad.Tracer", names.INTERNAL, "")
    assert "no public replacement" in str(refused.error())   # what the test would flag


def test_served_public_homes_are_the_very_objects(tmp_path):
    code = (
        "import jax, pmapkit.legacy\n"
        "pmapkit.legacy.install()\n"
        "import jax.stages, jax.errors\n"
        "from jax.interpreters import ad, pxla\n"
        "from jax.core import UnexpectedTracerError\n"
        "print(jax.Compiled is jax.stages.Compiled, ad.Tracer is jax.core.Tracer,\n"
        "      pxla.Mesh is jax.sharding.Mesh,\n"
        "      UnexpectedTracerError is jax.errors.UnexpectedTracerError)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True"] * 4
