"""Issues 32 and 41: every public name of the classic JAX releases of the
census (``pmapkit/legacy/census_data/``: 0.1.77 to 0.4.12 read from their
sources, 0.4.13 to 0.9.2 collected by running them) answers on JAX 0.10 after
``pmapkit.legacy.install()``: it works, or it raises an error naming it, the
release that removed it and what to use instead. Never a plain
AttributeError/ImportError. The names are held in one subprocess (the
installed build, outside the checkout)."""
import json
import re
import subprocess
import sys

import pytest

from pmapkit.legacy import census

from _subprocess_env import subprocess_env

TIMEOUT_S = 300


def _env():
    return subprocess_env()


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_check", "--json"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(),
                          cwd=tmp_path_factory.mktemp("census"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def test_the_census_holds_the_releases():
    assert census.COLLECTED == ("0.4.13", "0.4.30", "0.4.38", "0.6.2", "0.9.2")
    assert len(census.RELEASES) == 16
    for release in census.RELEASES:
        pairs = census.release_names(release)
        assert len(pairs) > 1500, release
        assert len(set(pairs)) == len(pairs)
        assert all(m == "jax" or m.startswith("jax.") for m, _ in pairs)
    assert ("jax", "api") in census.union()      # 0.2-era, read from the sources
    assert ("jax.sharding", "PositionalSharding") in census.union()


@pytest.mark.parametrize("release", census.RELEASES)
def test_every_name_of_a_release_works_or_raises_a_clear_error(held, release):
    counts = held["releases"][release]
    plain = {n: t for n, (o, t) in held["names"].items() if o == "plain"
             and tuple(n.rsplit(".", 1)) in set(census.release_names(release))}
    assert counts["plain"] == 0 and not plain, dict(list(plain.items())[:20])
    assert sum(counts.values()) == len(census.release_names(release))
    assert counts["native"] > 900


def test_clear_errors_name_the_release_and_the_replacement(held):
    clear = {n: t for n, (o, t) in held["names"].items() if o == "clear"}
    assert len(clear) > 400
    for name, text in clear.items():
        if " needs " in text and "pip install " in text:
            continue    # served, on a package classic JAX needed too (census.clear_error)
        owners = [name.rsplit(".", k)[0] for k in range(1, name.count("."))]
        assert name in text or any(f"{o} was removed" in text for o in owners), (name, text)
        assert re.search(r"removed in JAX (\d+\.\d+|after \d)", text), (name, text)
        assert "instead" in text or "no public replacement" in text, (name, text)
    # user-facing names get their modern spelling, internals say so
    assert "use jax.sharding.NamedSharding instead" in clear["jax.sharding.GSPMDSharding"]
    assert "jax.dlpack.is_supported_dtype" in clear["jax.dlpack.SUPPORTED_DTYPES"]
    assert "JAX internal; no public replacement" in clear["jax.core.pp_eqn"]


def test_served_names_include_the_issue_s_list(held):
    served = {n for n, (o, _) in held["names"].items() if o == "served"}
    for name in ["jax.lib.xla_bridge", "jax.lib.xla_bridge.get_backend",
                 "jax.experimental.enable_x64", "jax.experimental.x64_context",
                 "jax.sharding.PositionalSharding", "jax.sharding.use_mesh",
                 "jax.experimental.compilation_cache.compilation_cache.initialize_cache",
                 "jax.numpy.row_stack", "jax.numpy.in1d", "jax.numpy.trapz",
                 "jax.numpy.round_", "jax.numpy.NINF", "jax.random.threefry_2x32",
                 "jax.random.rbg_key", "jax.random.default_prng_impl", "jax.nn.normalize",
                 "jax.scipy.linalg.tril", "jax.tree_util.build_tree",
                 "jax.tree_util.AttributeKeyPathEntry", "jax.util", "jax.util.safe_map",
                 "jax.core.Primitive", "jax.core.ClosedJaxpr", "jax.clear_backends"]:
        assert name in served, name


def test_the_census_check_counts_before_install_too(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_check",
                           "--no-install"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["release", "pairs", "native", "served", "clear", "plain"]
    union = next(line for line in lines if line.startswith("union")).split()
    assert union[0] == "union" and int(union[3]) == 0 and int(union[5]) > 400


_PROBE_ATTRS = """
import jax, jax.experimental, pmapkit.legacy
pmapkit.legacy.install()
print(hasattr(jax.experimental, "loops"), hasattr(jax.core, "pp_eqn"),
      getattr(jax.core, "pp_eqn", "absent"), hasattr(jax, "api"), hasattr(jax, "util"))
try:
    from jax.core import pp_eqn
except ImportError as e:
    print(type(e).__name__, "JAX internal; no public replacement" in str(e))
import jax.scipy.linalg
print(jax.scipy.linalg.tril(jax.numpy.array([[1, 2], [3, 4]])).tolist())
"""


def test_hasattr_sees_refused_names_missing_and_served_ones_present(tmp_path):
    (tmp_path / "probe.py").write_text(_PROBE_ATTRS)
    proc = subprocess.run([sys.executable, "probe.py"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["False False absent True True",
                                        "RemovedModuleError True", "[[1, 0], [3, 4]]"]


def test_census_check_refuses_an_unknown_option(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_check", "--bogus"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(),
                          cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown option '--bogus'" in proc.stderr


def test_release_names_refuses_a_release_not_collected():
    with pytest.raises(ValueError, match="release must be one of 0.1.77"):
        census.release_names("0.1.0")


def test_the_collector_lists_a_release_s_public_names(tmp_path):
    """census_collect run on this interpreter (JAX 0.10): the file format,
    and what it leaves out."""
    out = tmp_path / "names"
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_collect", "--out",
                           str(out), sys.executable], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import jax
    path = out / f"jax-{jax.__version__}.txt"
    lines = path.read_text().splitlines()
    assert lines[0].startswith(f"# public names of jax {jax.__version__}")
    pairs = {tuple(line.split()) for line in lines[1:]}
    assert {("jax.numpy", "sin"), ("jax", "jit"), ("jax.sharding", "NamedSharding"),
            ("jax.scipy", "linalg")} <= pairs
    # typing re-exports, the standard library, private names, imported modules
    assert not {p for p in pairs if p[1] in ("Any", "Callable", "partial", "np", "os")
                or p[1].startswith("_")}
    # --probe: which census names answer here
    probe = tmp_path / "probe"
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_collect", "--probe",
                           sys.executable, "--out", str(probe)], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answered = {tuple(line.split()) for line in
                (probe / f"jax-{jax.__version__}.txt").read_text().splitlines()[1:]}
    assert ("jax.numpy", "sin") in answered and ("jax.core", "pp_eqn") not in answered
    assert answered <= set(census.union())


@pytest.mark.parametrize("args", [[], ["--out"], ["/no/such/python"],
                                  ["--probe", "x"]])
def test_the_collector_refuses_bad_usage(tmp_path, args):
    proc = subprocess.run([sys.executable, "-m", "pmapkit.legacy.census_collect", *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(),
                          cwd=tmp_path)
    assert proc.returncode == 2
    assert "usage" in proc.stderr or "no interpreter" in proc.stderr or "--out" in proc.stderr


def test_every_name_jax_lacks_has_its_removal_release():
    import jax
    if jax.__version__ != "0.10.2":
        pytest.skip("removed_in.txt was probed up to jax 0.10.2")
    lacking = {n: census.removed_in(n) for n in (f"{m}.{a}" for m, a in census.union())
               if census.missing_here(n)}
    assert len(lacking) > 500
    assert all(r and re.fullmatch(r"\d+\.\d+\.\d+(\.\.\d+\.\d+\.\d+)?", r)
               for r in lacking.values()), [kv for kv in lacking.items() if not kv[1]][:5]
    assert census.removed_in("jax.sharding.PositionalSharding") == "0.7.0"
    # no jaxlib between 0.4.14 and 0.4.18; the module's sources narrow it
    assert census.removed_in("jax.abstract_arrays") == "0.4.17"
