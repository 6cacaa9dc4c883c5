"""Issue 48: the census of real use (``census_data/real_use.tsv``): what
public code of 2019-2024 reaches, read with ``ast`` from pinned commits, and
the one reader of it (``census.real_use()``)."""
import json
import os
import re
import subprocess
import sys
import textwrap

from pmapkit.legacy import census
from pmapkit.legacy import census_real_use as cru


def test_the_table_names_sixty_repositories_each_at_a_pinned_commit():
    sources = census.real_use_sources()
    repositories = {s.repository for s in sources}
    assert len(repositories) >= 60
    for s in sources:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", s.repository), s
        assert re.fullmatch(r"[0-9a-f]{40}", s.commit), s
        assert "2019-01-01" <= s.date < "2024-06-01", s
    # more than the repositories the pmap usage census read
    # package data: read where pmapkit is installed, not beside the tests
    from importlib import resources
    usage = resources.files("pmapkit.tools.migrate").joinpath("usage_census.json")
    read_before = {r["repository"] for r in json.loads(usage.read_text())["repositories"]}
    assert read_before <= repositories
    assert len(repositories - read_before) >= 41


def test_every_row_is_a_kind_with_its_repositories():
    rows = census.real_use()
    assert len(rows) > 1000
    sources = census.real_use_sources()
    for row in rows:
        assert row.kind in cru.KINDS, row
        assert row.name.startswith(("jax.", "jaxlib.")), row
        assert all(0 <= i < len(sources) for i in row.repo_ids), row
        assert row.repos == len(row.repositories()) >= 1, row
    assert [r.repos for r in rows] == sorted((r.repos for r in rows), reverse=True)
    by_name = {r.name: r for r in rows}
    # the names the issue found in real code, each of its kind
    assert by_name["jax.interpreters.batching.BatchTracer"].kind == "name"
    assert by_name["jax.config.enable_omnistaging"].kind == "config_attr"
    assert by_name["jax.config:jax_enable_x64"].kind == "config_option"
    assert by_name["jax.Array.to_py"].kind == "array_member"
    assert by_name["jax.lib.xla_extension.CpuDevice"].kind == "jaxlib_class"
    assert by_name["jax.interpreters.batching"].kind == "module"
    assert {r.name for r in census.real_use(min_repos=2)} == {
        r.name for r in rows if r.repos >= 2}


_SOURCE = '''
import jax
import jax.numpy as jnp
from jax.interpreters import batching
from jax.config import config
from jax import test_util as jtu
import numpy as np

config.update("jax_enable_x64", True)
jax.config.enable_omnistaging()
print(jax.config.FLAGS.jax_xla_backend, config.x64_enabled)
print(getattr(jax.config, "jax_numpy_rank_promotion"), config.read("jax_debug_nans"))

class T(jtu.JaxTestCase):
    def f(self, config, jnp):
        return config.lr + jnp.anything + batching.BatchTracer

def g(x):
    y = jnp.zeros(3).block_until_ready()
    isinstance(jax.devices()[0], jax.lib.xla_extension.CpuDevice)
    return x.to_py(), x.device(), np.asarray(y).device
'''


def test_names_of_reads_imports_config_options_and_array_members():
    found, modules = cru.names_of(_SOURCE)
    names = {n for n, _ in found}
    kinds = {n: k for n, k in found if k}
    assert {"jax.interpreters.batching.BatchTracer", "jax.test_util.JaxTestCase",
            "jax.numpy.zeros", "jax.lib.xla_extension.CpuDevice", "jax.devices",
            "jax.config.config"} <= names
    assert kinds["jax.config.enable_omnistaging"] == "config_attr"
    assert kinds["jax.config.FLAGS"] == "config_attr"
    assert kinds["jax.config.x64_enabled"] == "config_attr"
    for option in ("jax_enable_x64", "jax_xla_backend", "jax_numpy_rank_promotion",
                   "jax_debug_nans"):
        assert kinds[f"jax.config:{option}"] == "config_option"
    assert kinds["jax.Array.block_until_ready"] == "array_member"
    assert kinds["jax.Array.to_py"] == "array_member"
    assert kinds["jax.Array.device"] == "array_member"     # called: x.device()
    # parameters hide the imports of the same name inside their function
    assert "jax.config.lr" not in names and "jax.numpy.anything" not in names
    assert {"jax.interpreters", "jax.config", "jax.numpy"} <= modules


def test_a_file_without_jax_reaches_nothing():
    assert cru.names_of("import numpy as np\nx = np.zeros(3).to_py()\n") == (set(), set())


def _git(repo, *args):
    subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                        "GIT_AUTHOR_DATE": "2021-03-04T00:00:00",
                        "GIT_COMMITTER_DATE": "2021-03-04T00:00:00"})


def test_the_command_rebuilds_a_table_from_git_directories(tmp_path):
    """``python -m pmapkit.legacy.census_real_use OUT OWNER/NAME=GIT_DIR@COMMIT``
    on two repositories (one read at two commits: it counts once)."""
    targets = []
    for name, texts in (("a/one", ["import jax\njax.tree_map(f, x)\n",
                                   "import jax\njax.config.enable_omnistaging()\n"]),
                        ("b/two", ["from jax import tree_map\n"])):
        repo = tmp_path / name.replace("/", "_")
        repo.mkdir()
        _git(str(repo), "init", "-q")
        for k, text in enumerate(texts):
            (repo / "m.py").write_text(text)
            _git(str(repo), "add", "m.py")
            _git(str(repo), "commit", "-qm", f"c{k}")
            commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                                    capture_output=True, text=True).stdout.strip()
            targets.append(f"{name}={repo}/.git@{commit}")
    out = tmp_path / "real_use.tsv"
    proc = subprocess.run([sys.executable, "-P", "-m", "pmapkit.legacy.census_real_use",
                           str(out), *targets], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.count("\nsource\t") == 3
    rows = dict(line.split("\t", 1) for line in text.splitlines()
                if line and not line.startswith(("#", "source", "name\t")))
    assert rows["jax.tree_map"] == "name\t2\t0,2"
    assert rows["jax.config.enable_omnistaging"] == "config_attr\t1\t1"
    assert "2021-03-04" in text


def test_the_spans_round_trip():
    for ids in ([0], [0, 1, 2, 5], [3, 7, 8, 9, 20]):
        assert census._spans(cru._spans(ids)) == ids


def test_the_usage_census_reads_through_the_same_reader():
    from pmapkit.tools.migrate import usage_census
    from pmapkit.legacy import census_git
    assert usage_census.python_files is census_git.python_files
    assert census_git.parse_target("o/n=/x/y.git@abc") == ("/x/y.git", "abc", "o/n")


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    env.pop("PMAPKIT_REPORT", None)
    return env


def test_census_check_holds_every_name_two_repositories_reach(tmp_path):
    """Served, or refused with its reason; the one plain error is the call
    ``x.device()``, which cannot be served (``names.UNSERVABLE`` says why)."""
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_check", "--json"],
                          capture_output=True, text=True, timeout=600, env=_env(),
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    held = json.loads(proc.stdout)
    two = held["real_use"]["2+ repositories"]
    assert sum(two.values()) == len(census.real_use(2))
    plain = {n for n, (o, _, repos) in held["real_use_names"].items()
             if o == "plain" and repos >= 2}
    assert plain <= {"jax.Array.device"}, plain
    assert two["served"] >= 140 and two["clear"] >= 30
    for name in ("jax.interpreters.batching.BatchTracer", "jax.test_util.JaxTestCase",
                 "jax.ShapedArray", "jax.config.FLAGS", "jax.config.enable_omnistaging",
                 "jax.Array.to_py", "jaxlib.xla_extension.DeviceArray",
                 "jax.test_util.cases_from_list", "jax.core.get_aval"):
        assert held["real_use_names"][name][0] == "served", (name, held["real_use_names"][name])
    # each refusal names the release; what it names to use instead is held
    # as a fact (it exists and does the job) by test_legacy_refusal_facts.py
    for name, (outcome, text, repos) in held["real_use_names"].items():
        if outcome == "clear" and repos >= 2:
            assert "removed in JAX" in text, name


def test_the_report_says_how_many_repositories_reach_each_name(tmp_path):
    (tmp_path / "old.py").write_text("import jax\nprint(jax.tree_map(abs, [-1]))\n"
                                     "jax.config.enable_omnistaging()\n")
    proc = subprocess.run([sys.executable, "-m", "pmapkit", "run", "--report=json", "old.py"],
                          capture_output=True, text=True, timeout=300, env=_env(),
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stderr.splitlines() if x.startswith('{"pmapkit_legacy_report"'))
    rows = {e["name"]: e for e in json.loads(line)["names"]}
    by_name = {r.name: r.repos for r in census.real_use()}
    assert rows["jax.tree_map"]["real_use"] == by_name["jax.tree_map"] > 40
    assert rows["jax.config.enable_omnistaging"]["real_use"] == by_name[
        "jax.config.enable_omnistaging"] >= 3
    from pmapkit.legacy import report
    repositories = len({s.repository for s in census.real_use_sources()})
    assert f"of {repositories} public repositories" in report.real_use_text("jax.tree_map")


def test_the_leftover_scan_flags_config_attributes_options_and_array_members():
    from pmapkit.tools.migrate import leftovers
    found = {name: line for line, name, _ in leftovers.scan(textwrap.dedent('''\
        import jax
        jax.config.enable_omnistaging()
        jax.config.update("jax_array", True)
        jax.config.update("jax_enable_x64", True)
        def f(x):
            return x.to_py(), x.device(), x.device_buffers, x.block_until_ready(), x.device
        '''))}
    assert found == {"jax.config.enable_omnistaging": 2, "jax.config:jax_array": 3,
                     "jax.Array.to_py": 6, "jax.Array.device": 6,
                     "jax.Array.device_buffers": 6}


def test_the_docs_section_is_the_census_as_it_stands():
    """docs/classic-names.md's census tables (per release, and of real use)
    are what docs/_tools/census_tables.py writes from the data and this JAX."""
    from _install import REPO     # the checkout, also when the tests run from a copy
    tool = os.path.join(REPO, "docs", "_tools", "census_tables.py")
    if not os.path.isfile(tool):
        import pytest
        pytest.skip("no docs/ in the checkout; set PMAPKIT_CHECKOUT")
    proc = subprocess.run([sys.executable, "-P", tool, "--check"], capture_output=True,
                          text=True, timeout=900, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
