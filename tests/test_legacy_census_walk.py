"""Issue 56 item 1: the release census reads every public module of each
release -- the installed package walked (``census_collect``), the sdist's
files walked (``census_sources``) -- not a fixed list; a module of a
release that is not read fails here."""
import io
import json
import os
import subprocess
import sys
import tarfile
import venv

import pytest

from pmapkit.legacy import census, census_collect, census_sources

DATA = os.path.join(os.path.dirname(census.__file__), "census_data")

_FAKE_JAX = {
    "__init__.py": "__version__ = '9.9.9'\ndef jit(f):\n  return f\n",
    "ad_checkpoint.py": "def checkpoint(f):\n  return f\n",
    "sub/__init__.py": "",
    "sub/deep.py": "DEEP = 1\n",
    "_src/hidden.py": "HIDDEN = 1\n",
    "tests/t.py": "T = 1\n",
    "lax/lax_test.py": "X = 1\n",
    "lax/__init__.py": "def add(a, b):\n  return a + b\n",
    "broken.py": "import not_a_package_anywhere\n",
}


def test_the_collector_reads_every_public_module_of_an_installed_release(tmp_path):
    """A release whose modules no list names (``jax.sub.deep``,
    ``jax.ad_checkpoint``): each is read; private, test and example modules
    are not; one whose import fails is recorded with its error."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True).stdout.strip()
    for path, text in _FAKE_JAX.items():
        target = os.path.join(site, "jax", path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write(text)
    result = census_collect.collect(str(python))
    assert result["version"] == "9.9.9"
    assert sorted(result["modules"]) == ["jax", "jax.ad_checkpoint", "jax.lax", "jax.sub",
                                         "jax.sub.deep"]
    assert result["modules"]["jax.ad_checkpoint"] == ["checkpoint"]
    assert result["modules"]["jax.sub.deep"] == ["DEEP"]
    assert result["missing"] == {"jax.broken": "ModuleNotFoundError:not_a_package_anywhere"}
    census_collect._write(result, str(tmp_path))
    walked = (tmp_path / census_collect.WALKED).read_text().splitlines()[1:]
    assert walked == ["9.9.9 jax read", "9.9.9 jax.ad_checkpoint read",
                      "9.9.9 jax.broken ModuleNotFoundError:not_a_package_anywhere",
                      "9.9.9 jax.lax read", "9.9.9 jax.sub read", "9.9.9 jax.sub.deep read"]


def test_the_sdist_reader_walks_every_public_module(tmp_path):
    path = tmp_path / "jax-9.9.8.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in _FAKE_JAX.items():
            data = text.encode()
            info = tarfile.TarInfo(f"jax-9.9.8/jax/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    version, modules = census_sources.release_modules(str(path))
    assert version == "9.9.8"
    assert sorted(modules) == ["jax", "jax.ad_checkpoint", "jax.broken", "jax.lax",
                               "jax.sub", "jax.sub.deep"]
    assert modules["jax.sub.deep"] == {"DEEP": None}
    assert census_sources.public_module("jax.experimental.pallas.ops.tpu")
    assert not census_sources.public_module("jax._src.util")
    assert not census_sources.public_module("jax.experimental.jax2tf.tests.x")
    assert not census_sources.public_module("jax.lax.lax_test")


def _walked():
    found = {}
    with open(os.path.join(DATA, census_collect.WALKED)) as f:
        for line in f:
            if line[0] != "#":
                release, module, outcome = line.split()
                found.setdefault(release, {})[module] = outcome
    return found


# packages outside JAX a module of a release needed (its import failed here)
_OUTSIDE = ("tensorflow", "tensorstore", "xprof", "mosaic", "OPERATION_NAME")


@pytest.mark.parametrize("release", census.COLLECTED)
def test_every_module_of_a_collected_release_was_read(release):
    walked = _walked()[release]
    assert len(walked) > 100
    with_names = {m for m, _ in census.collected_names(release)}
    # every module with names was walked and read; every walked module was
    # read, or its import needed a package outside JAX
    assert with_names <= {m for m, o in walked.items() if o == "read"}
    unread = {m: o for m, o in walked.items() if o != "read"}
    for module, outcome in unread.items():
        assert (outcome.endswith(_OUTSIDE) or module.startswith(
            ("jax.experimental.jax2tf", "jax.experimental.mosaic.gpu", "jax.collect_profile",
             "jax.experimental.array_serialization"))), (module, outcome)


def test_the_issue_s_module_is_read():
    """``jax.ad_checkpoint`` (not in the old list): its 0.4 names are there."""
    assert ("jax.ad_checkpoint", "checkpoint") in census.release_names("0.4.30")
    assert ("jax.ad_checkpoint", "remat") in census.release_names("0.4.30")
    assert ("jax.lax.lax_control_flow", "scan_p") in census.release_names("0.2.0")
    walked = _walked()
    assert all(walked[r].get("jax.ad_checkpoint") == "read" for r in census.COLLECTED)
