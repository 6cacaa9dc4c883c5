"""Issue 41: classic code of every era. The census back to jax 0.1 (read
from the releases' sources), removal releases derived from it (issue 43
item 2), the names served since, classic texts, numbers and module answers,
each against a classic release: golden files from jax 0.4.30
(``tests/golden/classic_answers_jax_0.4.30.*``,
``random_draws_2021_jax_0.4.30.txt``) where it has the name, the documented
behaviour otherwise. Scripts run unedited under ``pmapkit run`` in a few
subprocesses."""
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from pmapkit.legacy import census, census_sources
from pmapkit.legacy import names as legacy_names

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "legacy_scripts")
RUN_ONLY = os.path.join(HERE, "legacy_scripts_run_only")   # no migrate rules yet
GOLDEN = os.path.join(HERE, "golden")
RUN = [sys.executable, "-m", "pmapkit", "run"]
TIMEOUT_S = 240


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("PYTHONPATH", None)
    env.pop("PMAPKIT_REPORT", None)
    env.pop("JAX_THREEFRY_PARTITIONABLE", None)
    return env


def _run(args, cwd):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _golden():
    with open(os.path.join(GOLDEN, "classic_answers_jax_0.4.30.json")) as f:
        return json.load(f)


# -- the census's eras ------------------------------------------------------------

def test_the_census_reaches_back_to_the_0_1_series():
    assert census.ERAS == ("0.1.77", "0.2.0", "0.2.10", "0.2.20", "0.2.28", "0.3.0",
                           "0.3.10", "0.3.25", "0.4.1", "0.4.7", "0.4.12")
    assert census.RELEASES[0] == "0.1.77" and census.RELEASES[-1] == "0.9.2"
    assert set(census.COLLECTED) < set(census.RELEASES)
    for release in census.ERAS:
        pairs = census.release_names(release)
        assert len(pairs) > 2000 and len(set(pairs)) == len(pairs), release
    early = set(census.release_names("0.1.77"))
    assert {("jax", "partial"), ("jax", "api"), ("jax.core", "unit"),
            ("jax.lib.xla_bridge", "device_count"), ("jax.interpreters.sharded_jit",
                                                     "sharded_jit")} <= early
    assert ("jax", "partial") not in set(census.release_names("0.3.0"))
    assert census.history()["jax.core.unit"][-1] == "0.4.1"
    assert census.removed_in("jax.partial") == "0.2.21..0.2.28"
    assert census.removed_in("jax.core.unit") == "0.4.2..0.4.7"
    # names a classic module re-exported from outside JAX keep their origin
    assert census.origin("jax.experimental.global_device_array.Counter") == \
        "collections.Counter"
    assert census.origin("jax.jit") is None


def test_module_and_config_facts_come_from_the_sources():
    assert census.module_removed_in("jax.config") == "0.4.29"
    assert census.module_removed_in("jax.abstract_arrays") == "0.4.17"
    assert census.module_removed_in("jax.numpy") is None
    assert census.config_removed_in("jax_parallel_functions_output_gda") == "0.4.19..0.4.28"
    assert census.config_removed_in("jax_enable_x64") is None


def test_removal_releases_are_derived_from_the_census():
    """Issue 43 item 2: names.py writes no release; each record's is the
    census's, or an explicit override held against the census here."""
    assert "removed_in" not in {f.name for f in dataclasses.fields(legacy_names.Removed)}
    # the two facts that disagreed, now derived
    assert legacy_names.by_name("jax.config").removed_in == "0.4.29"
    assert legacy_names.by_name("jax.abstract_arrays").removed_in == "0.4.17"
    for name, (release, reason) in legacy_names.OVERRIDES.items():
        assert reason, name
        fact = census.removed_in(name)
        version = re.match(r"\d+(\.\d+)+", release).group(0)
        key = census._version_key
        if fact is None or fact.startswith("after"):
            continue        # the census saw no removal: the override states it
        low, _, high = fact.partition("..")
        assert key(low) <= key(version) <= key(high or low), (name, release, fact)
    records = [r for group in (legacy_names.NAMES, legacy_names.MODULES,
                               legacy_names.REFUSED_NAMES, legacy_names.REFUSED_MODULES,
                               legacy_names.SYSTEMS, legacy_names.PROPERTIES)
               for r in group]
    for record in records:
        if record.name in legacy_names.OVERRIDES:
            continue
        derived = census.removed_in(record.name)
        if derived is None or derived.startswith("after"):
            derived = census.module_removed_in(record.name) or derived
        assert record.removed_in == (derived or "0.10.0"), record.name


def _sdist(tmp_path):
    files = {
        "jax/__init__.py": "from functools import partial\nfrom .api import *\n"
                           "import numpy as np\nfrom . import lax\n_hidden = 1\n"
                           "from jax.config import config\n",
        "jax/api.py": "from typing import Any\nfrom .util import helper\n"
                      "def jit(f):\n  return f\ndef grad(f):\n  return f\n"
                      "__all__ = ['jit']\n__all__ += ['grad']\n",
        "jax/util.py": "def helper():\n  pass\n",
        "jax/config.py": "config = object()\nflags.DEFINE_bool('jax_old_option', True, 'h')\n",
        "jax/lax/__init__.py": "from jax._src.lax import *\ntry:\n  from .lax import add\n"
                               "except ImportError:\n  pass\n",
        "jax/lax/lax.py": "def add(x, y):\n  return x + y\n",
    }
    path = tmp_path / "jax-9.9.9.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"jax-9.9.9/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_the_sources_reader_takes_a_release_s_public_names(tmp_path):
    path = _sdist(tmp_path)
    version, modules = census_sources.release_modules(path)
    assert version == "9.9.9"
    # (jax.api and jax.util: public modules of the list, names of the package)
    assert modules["jax"] == {"partial": "functools.partial", "jit": None, "grad": None,
                              "lax": None, "config": None, "api": None, "util": None}
    # every public module of the files is walked: jax/lax/lax.py is jax.lax.lax
    assert modules["jax.lax"] == {"add": None, "lax": None}
    assert modules["jax.lax.lax"] == {"add": None}
    assert modules["jax.config"] == {"config": None}
    assert census_sources.config_options(path) == ("9.9.9", {"jax_old_option"})
    with pytest.raises(ValueError, match="sdist_path must be a jax source distribution"):
        bad = tmp_path / "other.tar.gz"
        with tarfile.open(bad, "w:gz"):
            pass
        census_sources.release_modules(str(bad))


def test_the_collector_refuses_sources_it_cannot_read(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_collect",
                           "--sources", str(tmp_path / "missing.tar.gz")],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(),
                          cwd=tmp_path)
    assert proc.returncode == 2 and "needs jax sdist files" in proc.stderr


# -- classic programs of the eras, unedited -------------------------------------

def test_names_removed_before_the_census_are_served(tmp_path):
    lines = _run(RUN + [os.path.join(RUN_ONLY, "era_names_2020.py")], tmp_path).stdout
    golden = _golden()["zeros_like_array"]
    assert lines.splitlines() == [
        "gda option True",
        "partial 6.0",
        "devices 8 8 0 1",
        "linear_util 4.0",
        f"zeros_like_array {golden[0]} {tuple(golden[1])} {golden[2]}",
        "gda True 8 (slice(0, 2, None), slice(0, 1, None)) [0.0, 2.0] True",
        "indices 8",
        "sharded_jit True (2, 4)",
    ]


def test_a_program_parsing_the_constraint_error_finds_partition_spec(tmp_path):
    lines = _run(RUN + [os.path.join(SCRIPTS, "olmax_constraint_probe_03.py")],
                 tmp_path).stdout.splitlines()
    assert lines == ["unconstrained: PartitionSpec('data', 'model')",
                     "unconstrained: PartitionSpec(None, 'model')", "sum 64.0"]


def test_random_draws_are_the_classic_release_s(tmp_path):
    script = os.path.join(SCRIPTS, "random_draws_2021.py")
    with open(os.path.join(GOLDEN, "random_draws_2021_jax_0.4.30.txt")) as f:
        golden = f.read()
    classic = _run(RUN + [script], tmp_path)
    assert classic.stdout == golden
    assert "; classic jax.random" in classic.stderr
    modern = _run(RUN + ["--modern-prng", script], tmp_path)
    assert modern.stdout != golden      # today's draws: what --modern-prng keeps


_ANSWERS = """
import importlib.util, json, pickle, sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
z = lax.zeros_like_array(2)
out = {"zeros_like_array_scalar": [str(z.dtype), z.tolist(), bool(z.weak_type)]}
import jax.experimental.maps as maps
from jax.interpreters import pxla
out["maps_thread_resources_identity"] = maps.thread_resources is pxla.thread_resources
ns = {}
exec("from jax.experimental.maps import *", ns)
out["star"] = sorted(n for n in ns if not n.startswith("_"))
out["dir"] = sorted(n for n in dir(maps) if not n.startswith("_"))
out["find_spec_loops"] = importlib.util.find_spec("jax.experimental.loops") is not None
try:
    import jax.experimental.loops
except ImportError as e:
    out["import_loops"] = type(e).__name__ + ": " + str(e)
out["hasattr_maps_xmap"] = hasattr(maps, "xmap")
out["pickle_tree_map"] = pickle.loads(pickle.dumps(jax.tree_map)) is jax.tree_map
out["pickle_shuffle"] = pickle.loads(pickle.dumps(jax.random.shuffle)) is jax.random.shuffle
out["pickle_index_update"] = pickle.loads(pickle.dumps(jax.ops.index_update)) is \\
    jax.ops.index_update
out["shuffle_draw"] = np.asarray(jax.random.shuffle(jax.random.PRNGKey(1),
                                                    jnp.arange(10))).tolist()
from jax.sharding import PositionalSharding
s = PositionalSharding(jax.devices()).reshape(4, 2)
f = jax.jit(lambda a: a * 2, in_shardings=s.T, out_shardings=s)
y = f(jax.device_put(jnp.arange(16.0).reshape(4, 4), s.T))
out["positional_two_orders"] = [np.asarray(y).tolist(),
                                [d.id for d in y.sharding._device_assignment]]
try:
    jax.config.update("jax_array", False)
except ValueError as e:
    out["jax_array_false"] = str(e)
try:
    jax.config.update("jax_host_callback_ad_transforms", True)
except AttributeError as e:
    out["removed_option"] = str(e)
print(json.dumps(out))
"""


@pytest.mark.parametrize("report", [False, True], ids=["plain", "report"])
def test_classic_modules_answer_as_the_classic_release(tmp_path, report):
    (tmp_path / "answers.py").write_text(_ANSWERS)
    args = RUN + (["--report"] if report else []) + ["answers.py"]
    got = json.loads(_run(args, tmp_path).stdout.splitlines()[-1])
    golden = _golden()
    for key in ("zeros_like_array_scalar", "maps_thread_resources_identity",
                "pickle_tree_map", "pickle_shuffle", "shuffle_draw"):
        assert got[key] == golden[key], key
    assert got["find_spec_loops"] is golden["find_spec_loops"] is False
    assert got["import_loops"].startswith("RemovedModuleError: jax.experimental.loops was "
                                          "removed in JAX 0.3.16")
    assert got["positional_two_orders"] == golden["positional_two_orders"][:2]
    assert got["pickle_index_update"] is True
    # every name the classic module serves comes with a star import, and
    # dir() lists what it serves, not what it refuses (xmap: refused)
    assert got["star"] == got["dir"]
    assert {"Mesh", "ResourceEnv", "EMPTY_ENV", "thread_resources", "mesh"} <= set(got["star"])
    assert "xmap" not in got["dir"] and got["hasattr_maps_xmap"] is False
    assert "jax_array=False was removed in JAX 0.4.13..0.4.14" in got["jax_array_false"]
    assert "jax_host_callback_ad_transforms was removed in JAX" in got["removed_option"]
