"""Issue 25: classic programs that use the removed names around pmap/pjit,
run unedited under ``pmapkit run --route-pmap`` in subprocesses from outside
the checkout and checked against references computed here with today's JAX;
the installed names against their modern equivalents, the refused names'
errors, and the ``--report`` table."""
import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.example_libraries import optimizers, stax

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "legacy_scripts")
RUN = [sys.executable, "-m", "pmapkit", "run"]
TIMEOUT_S = 180


def _env(**extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8", **extra)
    env.pop("PYTHONPATH", None)
    env.pop("PMAPKIT_REPORT", None) if "PMAPKIT_REPORT" not in extra else None
    return env


def _run(args, cwd, **extra):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=_env(**extra))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _script(tmp_path, name):
    proc = _run(RUN + ["--route-pmap", os.path.join(SCRIPTS, name)], tmp_path)
    assert "pmapkit.legacy report" not in proc.stderr   # off unless asked
    return proc


@pytest.fixture(autouse=True)
def _classic_promotion():
    # The references follow the classic programs, written for NumPy's rank
    # and dtype promotion and uint32 PRNGKey arrays (the suite raises on them),
    # and drawing random numbers as their releases did (pmapkit run's default).
    with (jax.numpy_rank_promotion("allow"), jax.legacy_prng_key("allow"),
          jax.numpy_dtype_promotion("standard"), jax.threefry_partitionable(False)):
        yield


def _numbers(line):
    return [float(v) for v in re.findall(r"-?\d+\.\d+(?:e-?\d+)?|-?\d+", line)]


def _close(line, expected, rtol=1e-4):
    got = _numbers(line)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-5)


def _softmax_loss(predict):
    def loss(params, batch):
        inputs, targets = batch
        return -jnp.mean(jnp.sum(predict(params, inputs) * targets, axis=1))
    return loss


# ------------------------------------------------------------ the scripts --

def test_spmd_mnist_02(tmp_path):
    lines = _script(tmp_path, "spmd_mnist_02.py").stdout.splitlines()
    rng = np.random.RandomState(0)
    images = rng.randn(64, 16).astype(np.float32)
    labels = np.eye(4, dtype=np.float32)[rng.randint(0, 4, 64)]
    init = np.random.RandomState(0)
    params = [(0.1 * init.randn(m, n).astype(np.float32),
               0.1 * init.randn(n).astype(np.float32)) for m, n in [(16, 8), (8, 4)]]

    def predict(params, x):
        (w1, b1), (w2, b2) = params
        logits = jnp.tanh(x @ w1 + b1) @ w2 + b2
        return logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)

    loss = _softmax_loss(predict)
    shards = (images.reshape(8, 8, 16), labels.reshape(8, 8, 4))
    total = jax.jit(jax.grad(lambda p: jnp.sum(jax.vmap(loss, (None, 0))(p, shards))))
    expected = []
    for _ in range(3):
        params = jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, total(params))
        expected.append(float(loss(params, (images, labels))))
    assert len(lines) == 3
    for k, line in enumerate(lines):
        _close(line, [k, expected[k]])


def test_stax_optimizers_pmap_02(tmp_path):
    lines = _script(tmp_path, "stax_optimizers_pmap_02.py").stdout.splitlines()
    init_fun, predict = stax.serial(stax.Dense(8), stax.Relu, stax.Dense(4), stax.LogSoftmax)
    loss = _softmax_loss(predict)
    _, params = init_fun(jax.random.PRNGKey(0), (-1, 16))
    data = np.random.RandomState(1)
    x = data.randn(64, 16).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[data.randint(0, 4, 64)]
    shards = (x.reshape(8, 8, 16), y.reshape(8, 8, 4))
    mean_grad = jax.jit(jax.grad(lambda p: jnp.mean(jax.vmap(loss, (None, 0))(p, shards))))
    opt_init, opt_update, get_params = optimizers.momentum(0.1, mass=0.9)
    state = opt_init(params)
    expected = []
    for i in range(3):
        state = opt_update(i, mean_grad(get_params(state)), state)
        expected.append(float(loss(get_params(state), (x, y))))
    assert len(lines) == 3
    for k, line in enumerate(lines):
        _close(line, [k, expected[k]])


def test_pmap_cookbook_02(tmp_path):
    lines = _script(tmp_path, "pmap_cookbook_02.py").stdout.splitlines()
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    y = np.asarray(jax.jit(lambda v: jnp.sin(v) * 2)(x))
    halo = x.copy()
    halo[:, 0] = x[np.arange(-1, 7), -1]
    halo[:, -1] += 100.0
    assert lines[0] == "sharded True True"
    # A pmap output's buffers are the per-device values, mapped axis dropped.
    assert lines[1] == "buffers 8 (4,) [0, 1, 2, 3, 4, 5, 6, 7]"
    _close(lines[2], [3] + y[3].tolist())
    assert lines[3] == f"halo {halo[:3].tolist()}"
    assert lines[4] == f"firsts {halo[:, 0].tolist()}"


def test_pjit_04_no_mesh(tmp_path):
    lines = _script(tmp_path, "pjit_04_no_mesh.py").stdout.splitlines()
    keys = jax.random.split(jax.random.PRNGKey(42), 2)
    params = [jax.random.normal(k, (m, n)) / np.sqrt(m)
              for k, m, n in zip(keys, [6, 5], [5, 3])]

    def apply(params, x):
        for w in params:
            x = jnp.tanh(x @ w)
        return x

    out = jax.jit(apply)(params, jnp.ones((4, 6)))
    grads = jax.grad(lambda p: jax.jit(apply)(p, jnp.ones((4, 6))).sum())(params)
    assert lines[0] == "params 45"
    assert lines[1] == "is DeviceArray True (4, 3)"
    assert lines[2] == "one buffer (4, 3) True"
    _close(lines[3], np.round(np.asarray(out)[0], 5).tolist())
    _close(lines[4], [float(jnp.linalg.norm(g)) for g in grads])
    assert lines[5] == "no mesh: True"


def test_host_callback_pmap_tree_03(tmp_path):
    lines = _script(tmp_path, "host_callback_pmap_tree_03.py").stdout.splitlines()
    total = float(jnp.sum(jnp.cos(jnp.arange(8.0)) * 2.0))
    _close(lines[0], [total, 8, total])
    pairs = {"a": (1.0, 2.0), "b": (3.0, 4.0)}
    summed = jax.tree.map(lambda u, v: u + v, pairs, pairs)
    leaves, treedef = jax.tree.flatten(summed)
    assert lines[1] == f"leaves {leaves} {jax.tree.unflatten(treedef, leaves[::-1])}"
    transposed = jax.tree.transpose(jax.tree.structure({"a": 0, "b": 0}),
                                    jax.tree.structure((0, 0)), pairs)
    assert lines[2] == f"transposed {transposed}"


def test_haiku_pruning_pmap_2020(tmp_path):
    lines = _script(tmp_path, "haiku_pruning_pmap_2020.py").stdout.splitlines()

    def topk_mask(value, density):
        flat = value.reshape(-1)
        order = jax.random.permutation(jax.random.PRNGKey(42),
                                       jnp.arange(flat.size, dtype=jnp.int32),
                                       independent=True)
        shuffled = flat[order]
        k = jnp.round(density * shuffled.size).astype(jnp.int32)
        keep = jnp.greater_equal(np.arange(shuffled.size), shuffled.size - k)
        inner = jnp.zeros_like(keep).at[jnp.argsort(shuffled)].set(keep).astype(np.int32)
        return jnp.zeros_like(inner).at[order].set(inner).reshape(value.shape)

    def loss(params, x, y):
        logp = jax.nn.log_softmax(x @ params["w"] + params["b"])
        return -jnp.mean(jnp.sum(logp * y, axis=1))

    rng = np.random.RandomState(0)
    params = {"w": rng.randn(16, 4).astype(np.float32) * 0.1, "b": np.zeros(4, np.float32)}
    x = rng.randn(64, 16).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.randint(0, 4, 64)]
    shards = (x.reshape(8, 8, 16), y.reshape(8, 8, 4))

    @jax.jit
    def step(params):
        grads = jax.grad(lambda p: jnp.mean(jax.vmap(loss, (None, 0, 0))(p, *shards)))(params)
        params = jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)
        return jax.tree.map(lambda p: p * topk_mask(p, 0.5), params)

    assert len(lines) == 3
    for k, line in enumerate(lines):
        with jax.profiler.StepTraceAnnotation("train", step_num=k):
            params = step(params)
        nnz = sum(int(jnp.sum(v != 0.0)) for v in jax.tree.leaves(params))
        _close(line, [k, float(loss(params, x, y)), nnz, 68])


def test_every_script_names_its_public_source():
    for name in sorted(os.listdir(SCRIPTS)):
        if name.endswith(".py"):
            with open(os.path.join(SCRIPTS, name)) as f:
                doc = ast.get_docstring(ast.parse(f.read()))
            assert doc, name
    scripts = [n for n in os.listdir(SCRIPTS) if n.endswith(".py")]
    assert len(scripts) >= 8


# ---------------------------------------------------- the names themselves --

_SEMANTICS = """
    import sys, warnings
    import numpy as np
    import jax, jax.numpy as jnp
    import pmapkit, pmapkit.legacy
    pmapkit.legacy.install()
    jax.config.update("jax_legacy_prng_key", "allow")
    from jax.sharding import NamedSharding, PartitionSpec as P
    tree = {"a": [1.0, 2.0], "b": (3.0,)}
    T = jax.tree_util
    print("tree", jax.tree_map(lambda v: v * 2, tree) == T.tree_map(lambda v: v * 2, tree),
          jax.tree_multimap(lambda u, v: u + v, tree, tree) == T.tree_map(lambda u, v: u + v, tree, tree),
          T.tree_multimap is T.tree_map, jax.tree_leaves(tree) == T.tree_leaves(tree),
          jax.tree_flatten(tree) == T.tree_flatten(tree),
          jax.tree_unflatten(T.tree_structure(tree), [4, 5, 6]) == T.tree_unflatten(T.tree_structure(tree), [4, 5, 6]),
          jax.tree_structure(tree) == T.tree_structure(tree),
          jax.treedef_is_leaf(T.tree_structure(1)))
    x = jnp.arange(12.0).reshape(3, 4)
    i = jax.ops.index[1:, ::2]
    ops = jax.ops
    pairs = [(ops.index_update, x.at[i].set(7.0)), (ops.index_add, x.at[i].add(7.0)),
             (ops.index_mul, x.at[i].multiply(7.0)), (ops.index_min, x.at[i].min(7.0)),
             (ops.index_max, x.at[i].max(7.0))]
    print("ops", i == np.s_[1:, ::2], all(bool((op(x, i, 7.0) == ref).all()) and op(x, i, 7.0).dtype == ref.dtype
                                          for op, ref in pairs),
          bool((ops.index_add(np.zeros(3, np.float32), np.array([0, 0]), 1.0) == jnp.zeros(3).at[np.array([0, 0])].add(1.0)).all()))
    y = pmapkit.pmap(lambda v: v * 2, devices=jax.devices()[::-1])(jnp.arange(16.0).reshape(8, 2))
    bufs = y.device_buffers
    print("buffers", [b.device.id for b in bufs], all(isinstance(b, jax.Array) and len(b.devices()) == 1 for b in bufs),
          all(np.array_equal(np.asarray(b), np.asarray(s.data)[0]) for b, s in zip(bufs, y.addressable_shards)),
          [b.shape for b in bufs][:2])
    psummed = pmapkit.pmap(lambda v: jax.lax.psum(v, "i"), "i")(jnp.arange(8.0))
    print("per-device values", [float(b) for b in psummed.device_buffers],
          pmapkit.pmap(lambda v: v, out_axes=1)(jnp.ones((8, 3))).device_buffers[0].shape,
          jax.pmap(lambda v: v)(jnp.ones((8, 3))).device_buffers[0].shape)
    z = pmapkit.pjit(lambda v: v + 1, P("x"), P("x"))
    with pmapkit.Mesh(np.array(jax.devices()), ("x",)):
        out = z(jnp.arange(16.0))
    print("pjit buffers", [b.shape for b in out.device_buffers][:2], out.device_buffers[1].tolist())
    one = jnp.ones(3) + 1
    print("one buffer", one.device_buffer.tolist(), one.device_buffer.device == one.devices().pop())
    try:
        y.device_buffer
    except ValueError as e:
        print("ValueError:", e)
    from jax.experimental import optimizers, stax
    import jax.example_libraries.optimizers as o, jax.example_libraries.stax as s
    print("example_libraries", optimizers is o, stax is s)
    from jax.config import config
    import jax.config
    print("config", config is jax.config, type(jax.config).__name__, "jax.config" in sys.modules)
    from jax.interpreters import pxla, xla
    arrays = [y, one, out]
    print("types", all(isinstance(a, t) for a in arrays for t in (pxla.ShardedDeviceArray, jnp.DeviceArray,
                                                                  xla.DeviceArray, jax.random.KeyArray,
                                                                  jax.random.PRNGKeyArray)),
          isinstance(np.ones(2), jnp.DeviceArray), jnp.DeviceArray is jax.Array)
    key = jax.random.PRNGKey(3)
    grid = jnp.arange(12).reshape(4, 3)
    print("shuffle", bool((jax.random.shuffle(key, grid) == jax.random.permutation(key, grid, 0, independent=True)).all()),
          bool((jax.random.shuffle(key, grid, 1) == jax.random.permutation(key, grid, 1, independent=True)).all()))
    P_ = jax.profiler
    print("profiler", P_.TraceContext is P_.TraceAnnotation, P_.StepTraceContext is P_.StepTraceAnnotation,
          P_.trace_function is P_.annotate_function)
    print("tie_in", jax.lax.tie_in(one, 5), jax.jit(lambda a, b: jax.lax.tie_in(a, b))(one, 2.0).tolist())
    from jax import abstract_arrays
    from jax.api import jit, grad
    print("modules", abstract_arrays.ShapedArray is jax.core.ShapedArray, jit is jax.jit, grad is jax.grad)
"""


def test_installed_names_match_their_modern_equivalents(tmp_path):
    (tmp_path / "probe.py").write_text(textwrap.dedent(_SEMANTICS))
    lines = _run([sys.executable, "probe.py"], tmp_path).stdout.splitlines()
    assert lines == [
        "tree True True True True True True True True",
        "ops True True True",
        "buffers [7, 6, 5, 4, 3, 2, 1, 0] True True [(2,), (2,)]",
        "per-device values " + str([28.0] * 8) + " (3,) (3,)",
        "pjit buffers [(2,), (2,)] [3.0, 4.0]",
        "one buffer [2.0, 2.0, 2.0] True",
        "ValueError: Length of buffers is greater than 1. Please use `.device_buffers` instead.",
        "example_libraries True True",
        "config True Config True",
        "types True False True",
        "shuffle True True",
        "profiler True True True",
        "tie_in 5 2.0",
        "modules True True True",
    ]


_REFUSED = """
    import sys
    sys.modules["optax"] = None     # optix is served from optax where it is installed
    import jax, pmapkit.legacy
    from pmapkit.legacy.names import RemovedFromJax
    pmapkit.legacy.install()
    print("hasattr", hasattr(jax, "xla_computation"), getattr(jax, "soft_pmap", "absent"))
    for stmt in ["jax.xla_computation", "jax.soft_pmap", "jax.custom_transforms",
                 "jax.interpreters.pxla.make_sharded_device_array",
                 "from jax.experimental.maps import xmap",
                 "from jax.experimental.maps import serial_loop",
                 "from jax import xla_computation",
                 "from jax.experimental.global_device_array import xla",
                 "from jax.experimental import loops", "import jax.experimental.optix",
                 "from jax.experimental import sharded_jit", "import jax.core; jax.core.unit",
                 "jax.abstract_arrays.ConcreteArray"]:
        try:
            exec(stmt if not stmt.startswith("jax.") else "import jax.interpreters.pxla, jax.abstract_arrays; " + stmt)
        except RemovedFromJax as e:
            kinds = [k.__name__ for k in (AttributeError, ImportError) if isinstance(e, k)]
            print(stmt, "|", "/".join(kinds), "|", e)
"""


def test_refused_names_raise_a_clear_error_where_touched(tmp_path):
    (tmp_path / "probe.py").write_text(textwrap.dedent(_REFUSED))
    lines = _run([sys.executable, "probe.py"], tmp_path).stdout.splitlines()
    assert lines[0] == "hasattr False absent"
    seen = {line.split(" | ")[0]: line.split(" | ")[1:] for line in lines[1:]}
    v = jax.__version__
    expect = {
        "jax.xla_computation": ("AttributeError", "0.4.34", "jax.jit(f).lower(*args).as_text()"),
        "jax.soft_pmap": ("AttributeError", "0.3.18",
                          "jax.vmap(f, in_axes, axis_name=axis_name)"),
        "jax.custom_transforms": ("AttributeError", "0.2.12", "jax.custom_jvp"),
        "jax.interpreters.pxla.make_sharded_device_array":
            ("AttributeError", "0.4.14", "jax.make_array_from_single_device_arrays"),
        "from jax.experimental.maps import xmap": ("ImportError", "0.4.31", "jax.shard_map"),
        "from jax.experimental.maps import serial_loop": ("ImportError", "0.4.31", "jax.lax.map"),
        "from jax import xla_computation": ("ImportError", "0.4.34", "AOT"),
        "from jax.experimental.global_device_array import xla":
            ("ImportError", "0.4.2..0.4.7", "JAX internal; no public replacement"),
        "from jax.experimental import loops": ("ImportError", "0.3.16", "jax.lax.fori_loop"),
        "import jax.experimental.optix": ("ImportError", "0.2.7", "optax"),
        "from jax.experimental import sharded_jit": ("ImportError", "0.3.16", "in_shardings"),
        "import jax.core; jax.core.unit": ("AttributeError", "0.4.2..0.4.7",
                                           "JAX internal; no public replacement"),
        "jax.abstract_arrays.ConcreteArray": ("AttributeError", "0.2.11..0.2.20", "jax.core"),
    }
    assert set(seen) == set(expect), lines
    for stmt, (kind, release, modern) in expect.items():
        got_kind, message = seen[stmt]
        assert got_kind == kind, (stmt, got_kind)
        assert f"JAX {release}" in message and modern in message, (stmt, message)
        if "JAX internal" not in modern and stmt != "jax.abstract_arrays.ConcreteArray":
            assert f"no faithful equivalent on JAX {v}" in message


_REPORT_LABELS = ("uses", "first use", "served by", "modern JAX", "example")


def _report_blocks(lines):
    """``{name line: [uses, first use, served by, modern, example]}`` from the
    default report: a name's line, then one labelled line per field, a long
    value folded onto lines indented under it."""
    blocks, name, label = {}, None, None
    for line in lines:
        if not line.startswith(" "):
            name = line
            blocks[name] = {}
        elif line[4:16].strip() in _REPORT_LABELS + ("real use",):
            label = line[4:16].strip()
            blocks[name][label] = line[16:].strip()
        else:
            blocks[name][label] += " " + line.strip()
    for b in blocks.values():
        # every name says how many public repositories reach it (census.real_use)
        assert re.fullmatch(r"\d+ of \d+ public repositories \(2019-2024\)", b["real use"]), b
    return {n: [b[k] for k in _REPORT_LABELS] for n, b in blocks.items()}


def test_report_lists_what_the_script_used(tmp_path):
    script = tmp_path / "old.py"
    script.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        from jax.experimental import optimizers
        from jax.config import config
        f = jax.pmap(lambda v: v + 1)
        for _ in range(3):
            y = f(jnp.arange(8.0))
        print(jax.tree_map(float, [1, 2]), isinstance(y, jnp.DeviceArray), len(y.device_buffers))
        try:
            from jax.experimental.maps import xmap
        except ImportError:
            print("no xmap")
    """))
    for options, extra in (([], {"PMAPKIT_REPORT": "1"}), (["--report"], {}),
                           (["--report=wide"], {}), ([], {"PMAPKIT_REPORT": "wide"})):
        proc = _run(RUN + ["--route-pmap", *options, str(script)], tmp_path, **extra)
        assert proc.stdout.splitlines() == ["[1.0, 2.0] True 8", "no xmap"]
        report = proc.stderr[proc.stderr.index("pmapkit.legacy report:"):].splitlines()
        assert report[0].startswith("pmapkit.legacy report: 8 classic name(s) used"), report
        wide = "wide" in options[0] if options else extra["PMAPKIT_REPORT"] == "wide"
        if wide:   # one line per name, however wide
            rows = {}
            for r in report[3:]:
                cells = [c.strip() for c in r.split("|")]
                assert re.fullmatch(r"\d+ repos", cells.pop(4)), r   # real use
                rows[cells[0]] = cells[1:]
        else:      # within 100 columns: a few lines per name
            assert max(len(line) for line in report) <= 100, report
            rows = _report_blocks(report[1:])
        assert len(rows) == 8, report
        # uses | first use (file:line in the script) | served by | modern | example
        first = {name: row.pop(1) for name, row in rows.items()}
        assert first["jax.tree_map (removed in 0.6.0)"] == f"{script}:8"
        assert first["jax.experimental.optimizers (removed in 0.3.16)"] == f"{script}:3"
        assert first["jax.experimental.maps.xmap (removed in 0.4.31)"] == f"{script}:10"
        assert rows["jax.pmap (removed in 0.10.0 (the C++ pmap))"][:2] == [
            "1 calls", "pmapkit.pmap (--route-pmap)"]   # built once: the 3 calls of f are not counted
        assert rows["jax.tree_map (removed in 0.6.0)"] == [
            "1 calls", "jax.tree_util.tree_map", "jax.tree.map",
            "jax.tree.map(...)  # or jax.tree_util.tree_map"]
        assert rows["jax.numpy.DeviceArray (removed in 0.4.14)"][:2] == [
            "1 uses", "jax.Array"]
        assert rows["jax.Array.device_buffers (removed in 0.4.27)"][0] == "1 reads"
        assert rows["jax.experimental.optimizers (removed in 0.3.16)"][0] == "1 imports"
        assert rows["jax.config (removed in 0.4.29)"][0] == "1 reads"
        assert rows["jax.experimental.maps.xmap (removed in 0.4.31)"][:3] == [
            "1 refused uses", "refused: a clear error", "jax.shard_map"]


_MIGRATION = """
    import json, os
    import numpy as np
    import jax
    from jax.experimental import PartitionSpec
    from jax.experimental.pjit import pjit, with_sharding_constraint
    from jax.experimental import host_callback as hcb
    from jax.experimental import maps
    f = pjit(lambda x: with_sharding_constraint(x * 2, PartitionSpec("x")),
             in_axis_resources=PartitionSpec("x"), out_axis_resources=None)
    with maps.Mesh(np.array(jax.devices()), ("x",)):
        print(float(f(np.arange(8.0)).sum()))
    print(jax.jit(lambda x: hcb.call(np.sin, x, result_shape=x))(np.zeros(2)).tolist())
    hcb.id_tap(lambda *a: None, 1.0)
"""


@pytest.mark.parametrize("how", ["--report=json", "--report=PATH", "PMAPKIT_REPORT=json"])
def test_report_json_is_the_migration_map(tmp_path, how):
    script = tmp_path / "old.py"
    script.write_text(textwrap.dedent(_MIGRATION))
    out = tmp_path / "report.json"
    options, extra = {"--report=json": (["--report=json"], {}),
                      "--report=PATH": ([f"--report={out}"], {}),
                      "PMAPKIT_REPORT=json": ([], {"PMAPKIT_REPORT": "json"})}[how]
    proc = _run(RUN + [*options, str(script)], tmp_path, **extra)
    assert proc.stdout.splitlines() == ["56.0", "[0.0, 0.0]"]
    if how == "--report=PATH":
        report = json.loads(out.read_text())
    else:
        line, = [l for l in proc.stderr.splitlines() if l.startswith('{"pmapkit_legacy_report"')]
        report = json.loads(line)
    names = {e["name"]: e for e in report["names"]}
    # first used where imported; counted where built (the spec, and the one in the body)
    assert names["jax.experimental.PartitionSpec"]["first_use"] == f"{script}:5"
    assert (names["jax.experimental.PartitionSpec"]["uses"],
            names["jax.experimental.PartitionSpec"]["how"]) == (2, "uses")
    assert names["jax.experimental.PartitionSpec"]["modern"] == "jax.sharding.PartitionSpec"
    call = names["jax.experimental.host_callback.call"]
    assert call["modern"].startswith("jax.pure_callback") and "NOT jax.debug.callback" in call["modern"]
    assert call["first_use"] == f"{script}:13"
    assert names["jax.experimental.host_callback.id_tap"]["modern"] == "jax.debug.callback"
    assert "in_axis_resources -> in_shardings" in names["jax.experimental.pjit.pjit"]["modern"]
    assert names["jax.experimental.pjit.with_sharding_constraint"]["uses"] == 1
    assert names["jax.experimental.maps"]["first_use"] == f"{script}:8"


def test_report_lists_names_only_imported(tmp_path):
    script = tmp_path / "imports.py"
    script.write_text(textwrap.dedent("""
        from jax.experimental import PartitionSpec
        from jax.experimental.pjit import with_sharding_constraint
        import jax
        print(jax.tree_map(float, [1]))
    """))
    proc = _run(RUN + ["--report=json", str(script)], tmp_path)
    line, = [l for l in proc.stderr.splitlines() if l.startswith('{"pmapkit_legacy_report"')]
    names = {e["name"]: e for e in json.loads(line)["names"]}
    assert set(names) == {"jax.experimental.PartitionSpec",
                          "jax.experimental.pjit.with_sharding_constraint", "jax.tree_map"}
    for name, where in [("jax.experimental.PartitionSpec", 2),
                        ("jax.experimental.pjit.with_sharding_constraint", 3)]:
        assert (names[name]["uses"], names[name]["how"]) == (0, "uses (imported)")
        assert names[name]["first_use"] == f"{script}:{where}"
    assert (names["jax.tree_map"]["uses"], names["jax.tree_map"]["how"]) == (1, "calls")


def test_a_served_name_missing_its_classic_dependency_is_a_clear_answer():
    # jax.test_util needs absl-py, as the classic module did: without it the
    # name says so and how to install it, which counts as clear, and a plain
    # ModuleNotFoundError does not.
    from pmapkit.legacy.census import clear_error
    said = ModuleNotFoundError("jax.test_util.JaxTestCase needs absl-py, as the classic "
                               "jax.test_util did (No module named 'absl'): pip install absl-py")
    assert clear_error(said, "jax.test_util.JaxTestCase")
    assert not clear_error(ModuleNotFoundError("No module named 'absl'"),
                           "jax.test_util.JaxTestCase")
    assert not clear_error(said, "jax.test_util.check_eq")   # names another name
