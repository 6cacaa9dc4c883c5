"""``pmapkit run`` and ``pmapkit.legacy.install``: old scripts, unedited, in
subprocesses (8 host devices, bounded by timeouts)."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from _subprocess_env import sigint_as_default

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "legacy_scripts")
RUN = [sys.executable, "-m", "pmapkit", "run"]
TIMEOUT_S = 180
LEGACY_LINE = "pmapkit.legacy: "


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("PYTHONPATH", None)
    return env


def _run(args, cwd, **kw):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=_env(), **kw)


def _script(tmp_path, body, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _legacy_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith(LEGACY_LINE)]


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout.splitlines()


def test_a_jax_03_pjit_and_maps_program(tmp_path):
    lines = _ok(_run(RUN + [os.path.join(SCRIPTS, "pjit_maps_03.py")], tmp_path))
    assert lines == ["mesh {'data': 4, 'model': 2}", "shape (8, 6)", "matches numpy True"]


def test_a_jax_04_pjit_program_with_sharding_objects(tmp_path):
    lines = _ok(_run(RUN + [os.path.join(SCRIPTS, "pjit_named_sharding_04.py")], tmp_path))
    assert lines == ["sharding kept True", "values [-15.0, -13.0, -11.0, -9.0]",
                     "matches numpy True", "omitted specs keep True 32.0"]


def test_a_host_callback_and_jax_export_program(tmp_path):
    proc = _run(RUN + [os.path.join(SCRIPTS, "host_callback_export.py")], tmp_path)
    lines = _ok(proc)
    assert lines[:2] == ["what: sin", "[0.         0.84147096 0.9092974 ]"]
    assert lines[2:] == [
        "jit result 3.50154",
        "tapped [[0.0, 1.68294, 1.81859]]",
        "exported predict ['float32[3,2]', 'float32[4,3]'] ['float32[4,2]']",
        "round trip matches True",
    ]


@pytest.mark.parametrize("options", [[], ["--route-pmap"]])
def test_one_short_stderr_line_counts_what_was_installed(tmp_path, options):
    script = _script(tmp_path, "import jax.experimental.maps\n")
    proc = _run(RUN + options + [script], tmp_path)
    _ok(proc)
    said = _legacy_lines(proc.stderr)
    assert len(said) == 1, proc.stderr
    assert len(said[0]) <= 100, (len(said[0]), said[0])
    routed = "; jax.pmap routed" if options else ""
    assert re.fullmatch(r"pmapkit\.legacy: served \d+ classic names; classic jax\.random"
                        + routed + r" \(list: --report\)", said[0]), said[0]


def test_a_jaxline_program_reads_jax_api_as_an_attribute(tmp_path):
    lines = _ok(_run(RUN + [os.path.join(SCRIPTS, "jaxline_api_attribute.py")], tmp_path))
    assert lines == ["sharded (8, 2) 56.0", "replicated (8,) 4.0", "jit is jax.jit True"]


def test_an_easylm_program_s_constraints_see_the_mesh(tmp_path):
    """The model adds its activation constraints only where
    thread_resources shows a mesh: inside ``with maps.Mesh`` they are there."""
    lines = _ok(_run(RUN + [os.path.join(SCRIPTS, "easylm_constraint_gate_04.py")],
                     tmp_path))
    assert lines == ["outside True", "inside OrderedDict([('dp', 4), ('mp', 2)])",
                     "constrained True", "values True", "after True"]


@pytest.mark.parametrize("name, lines", [("pmap_cookbook_02.py", 5),
                                         ("flax_style_pmap_train_2021.py", 6)])
def test_device_buffers_of_jax_s_own_pmap_read_as_routed(tmp_path, name, lines):
    """Without --route-pmap a script's jax.pmap is JAX 0.10's own: the
    ``device_buffers`` of its results (with an ``axis_name`` too) are one
    buffer per device without the mapped axis, as classic pmap's were, so
    the script prints what it prints with pmapkit's pmap."""
    script = os.path.join(SCRIPTS, name)
    plain = _ok(_run(RUN + [script], tmp_path))
    routed = _ok(_run(RUN + ["--route-pmap", script], tmp_path))
    assert len(plain) == lines and plain == routed


def test_a_03_program_catches_the_classic_value_error(tmp_path):
    lines = _ok(_run(RUN + [os.path.join(SCRIPTS, "classic_constraint_error_03.py")],
                     tmp_path))
    assert lines == ["caught ValueError: True True",
                     "also the 0.4 NotImplementedError: True"]


_SHOW_MAIN = """
    import os, sys
    print("name", __name__)
    print("file", __file__)
    print("argv", sys.argv[1:])
    print("path0", sys.path[0])
    if sys.argv[1:2] == ["raise"]:
        def inner():
            raise ValueError("raised by the script")
        inner()
    sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_a_script_runs_as_main_as_python_runs_it(tmp_path, status):
    """sys.argv, __name__, __file__, sys.path[0] and the exit status are
    python's own."""
    script = _script(tmp_path, _SHOW_MAIN)
    args = [str(status), "--flag", "-m", "x"]
    direct = subprocess.run([sys.executable, script, *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    proc = _run(RUN + [script, *args], tmp_path)
    assert proc.returncode == direct.returncode == status
    assert proc.stdout == direct.stdout
    assert f"argv ['{status}', '--flag', '-m', 'x']" in proc.stdout.splitlines()


def test_an_uncaught_exception_prints_python_s_traceback_and_exits_1(tmp_path):
    script = _script(tmp_path, _SHOW_MAIN)
    direct = subprocess.run([sys.executable, script, "raise"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    proc = _run(RUN + [script, "raise"], tmp_path)
    assert proc.returncode == direct.returncode == 1
    traceback = [line for line in proc.stderr.splitlines()
                 if not line.startswith(LEGACY_LINE)]
    assert traceback == direct.stderr.splitlines()
    assert traceback[-1] == "ValueError: raised by the script"


def test_module_mode_runs_like_python_m(tmp_path):
    (tmp_path / "oldpkg").mkdir()
    (tmp_path / "oldpkg" / "__init__.py").write_text("")
    (tmp_path / "oldpkg" / "train.py").write_text(textwrap.dedent("""
        import sys
        from jax.experimental import maps
        from jax.experimental.pjit import pjit
        print("name", __name__, "argv", sys.argv[1:], "path0", sys.path[0])
        print("argv0 is the module file", sys.argv[0] == __file__)
        print("maps", maps.Mesh.__module__, "pjit", pjit.__module__)
        sys.exit(int(sys.argv[1]))
    """))
    proc = _run(RUN + ["-m", "oldpkg.train", "5", "--lr", "0.1"], tmp_path)
    assert proc.returncode == 5, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        f"name __main__ argv ['5', '--lr', '0.1'] path0 {tmp_path}",
        "argv0 is the module file True",
        "maps pmapkit.mesh pjit pmapkit.pjit",
    ]
    assert len(_legacy_lines(proc.stderr)) == 1


_WHICH_PMAP = """
    import jax, jax.numpy as jnp
    import pmapkit
    from jax import pmap
    f = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
    print("jax.pmap is pmapkit's", jax.pmap is pmapkit.pmap, pmap is pmapkit.pmap)
    print("psum", f(jnp.arange(8.0)).tolist())
"""


@pytest.mark.parametrize("route", [True, False], ids=["route-pmap", "default"])
def test_route_pmap_makes_jax_pmap_pmapkit_s(tmp_path, route):
    script = _script(tmp_path, _WHICH_PMAP)
    proc = _run(RUN + (["--route-pmap"] if route else []) + [script], tmp_path)
    assert _ok(proc) == [f"jax.pmap is pmapkit's {route} {route}", "psum " + str([28.0] * 8)]
    said = _legacy_lines(proc.stderr)
    assert len(said) == 1
    assert ("; jax.pmap routed" in said[0]) is route


def test_install_never_replaces_what_jax_has(tmp_path):
    """A JAX that still has the old modules and names (stood in for by
    objects put there first) keeps every one of them; a second install adds
    nothing and says nothing."""
    probe = _script(tmp_path, """
        import sys, types, warnings
        import jax, jax.experimental
        existing = {}
        for name in ["jax.experimental.maps", "jax.experimental.host_callback",
                     "jax.experimental.export", "jax.experimental.jax2tf",
                     "jax.experimental.jax2tf.jax_export"]:
            existing[name] = sys.modules[name] = types.ModuleType(name)
        classic = types.ModuleType("jax.experimental.pjit")
        def pjit(fun, in_axis_resources, out_axis_resources, static_argnums=()):
            return fun
        classic.pjit, classic.with_sharding_constraint = pjit, object()
        classic.PartitionSpec = object()
        sys.modules["jax.experimental.pjit"] = existing["jax.experimental.pjit"] = classic
        marks = {"PartitionSpec": object()}
        jax.experimental.PartitionSpec = marks["PartitionSpec"]
        jax.device_put_replicated = marks["device_put_replicated"] = lambda x, d: x
        jax.device_put_sharded = marks["device_put_sharded"] = lambda s, d: s
        jax_pmap = jax.pmap
        jax.tree_map = marks["tree_map"] = lambda f, t: t
        import jax.ops
        jax.ops.index_update = marks["index_update"] = lambda x, i, y: x

        import pmapkit.legacy
        from pmapkit.legacy import names as legacy_names
        # the census's own names (x64, compilation cache...) are not at stake here
        legacy_census_served = {r.name for r in legacy_names.NAMES + legacy_names.MODULES
                                + legacy_names.REAL_USE}
        legacy_census_served |= {n for n, r in legacy_names.census_records().items()
                                 if r.make is not None}
        first = pmapkit.legacy.install()
        systems = ("jax.experimental", "jax.device_put", "jax.pmap", "jax.tree_map",
                   "jax.ops.index_update")
        print("installed", [n for n in first if n.startswith(systems)
                            and n not in ("jax.experimental.optimizers",
                                          "jax.experimental.stax")
                            and n not in legacy_census_served])
        print("again", list(pmapkit.legacy.install()))
        import jax.experimental.maps
        from jax.experimental.pjit import pjit as got_pjit
        print("modules kept", all(sys.modules[n] is m for n, m in existing.items()))
        print("pjit kept", got_pjit is pjit)
        print("names kept", jax.experimental.PartitionSpec is marks["PartitionSpec"],
              jax.device_put_replicated is marks["device_put_replicated"],
              jax.device_put_sharded is marks["device_put_sharded"],
              jax.pmap is jax_pmap)
        print("census names kept", jax.tree_map is marks["tree_map"],
              jax.ops.index_update is marks["index_update"])
    """)
    proc = _run([sys.executable, probe], tmp_path)
    assert _ok(proc) == ["installed []", "again []", "modules kept True", "pjit kept True",
                         "names kept True True True True", "census names kept True True"]
    # The census names this stand-in JAX lacks are installed (one line says so).
    assert len(_legacy_lines(proc.stderr)) == 1


def test_install_twice_says_it_once_and_route_later(tmp_path):
    probe = _script(tmp_path, """
        import pmapkit, pmapkit.legacy, jax
        first = pmapkit.legacy.install()
        print("second", list(pmapkit.legacy.install()))
        print("route", list(pmapkit.legacy.install(route_pmap=True)))
        print("recorded", pmapkit.legacy.installed() == first + ("jax.pmap",))
        import jax.experimental.maps as maps, pmapkit
        # the classic module: pmapkit's maps, with JAX's thread_resources (as
        # classic maps shared it with pxla)
        from jax.interpreters import pxla
        print("maps", maps.Mesh is pmapkit.maps.Mesh, maps.mesh is pmapkit.maps.mesh,
              maps.thread_resources is pxla.thread_resources, maps.__name__)
        from jax.experimental import PartitionSpec
        print("PartitionSpec", PartitionSpec is jax.sharding.PartitionSpec)
    """)
    proc = _run([sys.executable, probe], tmp_path)
    assert _ok(proc) == ["second []", "route ['jax.pmap']", "recorded True",
                         "maps True True True jax.experimental.maps", "PartitionSpec True"]
    said = _legacy_lines(proc.stderr)
    assert len(said) == 2
    assert said[0].count("served ") == 1 and "jax.pmap" not in said[0]
    assert said[1].endswith(": jax.pmap routed (list: --report)"), said[1]


def test_jax2tf_without_tensorflow_is_a_stand_in_holding_jax_export(tmp_path):
    import importlib.util
    if importlib.util.find_spec("tensorflow") is not None:
        pytest.skip("TensorFlow is installed: the real jax2tf is kept")
    probe = _script(tmp_path, """
        import pmapkit.legacy, pmapkit.export
        pmapkit.legacy.install()
        import jax.experimental.jax2tf as jax2tf
        from jax.experimental.jax2tf import jax_export
        print("jax_export", jax_export is pmapkit.export)
        try:
            jax2tf.convert
        except AttributeError as e:
            print("AttributeError:", e)
    """)
    assert _ok(_run([sys.executable, probe], tmp_path)) == [
        "jax_export True",
        "AttributeError: jax.experimental.jax2tf.convert needs TensorFlow, which is not "
        "installed; pmapkit.legacy provides only jax.experimental.jax2tf.jax_export here"]


def test_device_put_replicated_and_sharded_come_from_pmapkit(tmp_path):
    import pmapkit
    # pmapkit has them: a missing one is a regression, never a skip.
    assert callable(pmapkit.device_put_replicated) and callable(pmapkit.device_put_sharded)
    script = _script(tmp_path, """
        import jax, numpy as np, pmapkit
        devices = jax.local_devices()
        r = jax.device_put_replicated(np.float32(1.5), devices)
        s = jax.device_put_sharded([np.full((2,), i, np.float32) for i in range(8)], devices)
        print(jax.device_put_replicated is pmapkit.device_put_replicated,
              jax.device_put_sharded is pmapkit.device_put_sharded)
        print(r.shape, s.shape, float(r.sum()), float(s.sum()))
    """)
    assert _ok(_run(RUN + [script], tmp_path)) == ["True True", "(8,) (8, 2) 12.0 56.0"]


@pytest.mark.parametrize("args, status, message", [
    ([], 2, "pmapkit run: error: a program to run is required: a script, a notebook, "
             "-m module, -c code, - (stdin) or a command"),
    (["-c"], 2, "pmapkit run: error: -c needs the code to run"),
    (["no_such_script.py"], 2, "pmapkit run: error: no such script: 'no_such_script.py'"),
    (["--bogus", "x.py"], 2, "pmapkit run: error: unknown option '--bogus'"),
    (["-m"], 2, "pmapkit run: error: -m needs a module name"),
    (["--report=xml", "x.py"], 2,
     "pmapkit run: error: --report= takes wide, json or a path ending in .json"),
    (["-m", "no_such_module_here"], 1, ": No module named no_such_module_here"),
])
def test_bad_usage(tmp_path, args, status, message):
    proc = _run(RUN + args, tmp_path)
    assert proc.returncode == status
    assert message in proc.stderr


def test_help(tmp_path):
    proc = _run(RUN + ["--help"], tmp_path)
    assert proc.returncode == 0
    # The program as typed: RUN is `python -m pmapkit run`.
    assert proc.stdout.startswith(
        f"usage: {os.path.basename(sys.executable)} -m pmapkit run [--route-pmap] "
        "[--modern-prng] [--report[=FORM]] script.py [args ...]")
    assert "--route-pmap  also make jax.pmap pmapkit's pmap" in proc.stdout
    assert "--report      at exit, list on stderr the classic names" in proc.stdout


def test_the_console_script_runs_a_script_beside_its_own_modules(tmp_path):
    import sysconfig
    console = os.path.join(sysconfig.get_path("scripts"), "pmapkit")
    if not os.path.exists(console):
        pytest.skip(f"no pmapkit console script at {console}")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "helper.py").write_text("VALUE = 42\n")
    script = _script(tmp_path / "app", """
        import sys
        import helper
        from jax.experimental.pjit import pjit
        print("helper", helper.VALUE, "path0", sys.path[0])
    """)
    proc = _run([console, "run", script], tmp_path)
    assert _ok(proc) == [f"helper 42 path0 {tmp_path / 'app'}"]


def test_run_a_folder_with_main_and_a_script_on_stdin_as_python_does(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper.py").write_text("X = 'helper'\n")
    (app / "__main__.py").write_text(
        "import sys, helper\nprint(__name__, helper.X, sys.path[0], sys.argv[1:])\n")
    direct = subprocess.run([sys.executable, "app", "a"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    proc = _run(RUN + ["app", "a"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == direct.stdout == f"__main__ helper {app} ['a']\n"
    (tmp_path / "empty").mkdir()
    proc = _run(RUN + ["empty"], cwd=tmp_path)
    assert proc.returncode == 1
    assert f"can't find '__main__' module in {str(tmp_path / 'empty')!r}" in proc.stderr
    source = "import sys\nprint(__name__, __file__, repr(sys.path[0]), sys.argv)\n"
    direct = subprocess.run([sys.executable, "-", "x"], cwd=tmp_path, input=source,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    proc = _run(RUN + ["-", "x"], cwd=tmp_path, input=source)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == direct.stdout == "__main__ <stdin> '' ['-', 'x']\n"


@pytest.mark.parametrize("typed", ["app", "app/", "app.zip", "main.py", "./main.py"])
def test_argv0_is_as_typed_as_python_keeps_it(tmp_path, typed):
    """``python app`` keeps ``sys.argv[0] == 'app'`` as typed (a folder, a
    zip file, a script), with ``__file__`` and ``sys.path[0]`` absolute."""
    import zipfile
    source = "import sys\nprint(repr(sys.argv), __file__, sys.path[0], __name__)\n"
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text(source)
    (tmp_path / "main.py").write_text(source)
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as archive:
        archive.writestr("__main__.py", source)
    direct = subprocess.run([sys.executable, typed, "a"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    proc = _run(RUN + [typed, "a"], cwd=tmp_path)
    assert proc.returncode == direct.returncode == 0, proc.stderr + direct.stderr
    assert proc.stdout == direct.stdout
    assert proc.stdout.startswith(f"[{typed!r}, 'a'] {tmp_path}"), proc.stdout


def test_an_interrupted_script_shows_only_its_own_frames(tmp_path):
    import signal
    script = _script(tmp_path, """\
        import time
        def wait():
            print("ready", flush=True)
            time.sleep(120)
        wait()
    """)

    def interrupted(command):
        proc = subprocess.Popen(command + [script], cwd=tmp_path, env=_env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=sigint_as_default)
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT_S)
        # Frames by file and function (the signal may land on the print).
        frames = [re.sub(r", line \d+", "", line.strip()) for line in err.splitlines()
                  if line.strip().startswith("File ")]
        return proc.returncode, frames, err.rstrip().splitlines()[-1]

    want = interrupted([sys.executable])
    got = interrupted(RUN)
    assert got == want
    assert want[0] == -signal.SIGINT and want[2] == "KeyboardInterrupt"
    assert len(want[1]) == 2 and all(script in frame for frame in want[1])


def test_install_starts_no_backend_so_xla_flags_set_after_import_count(tmp_path):
    # Classic JAX starts its backends at the first JAX operation, not at
    # ``import jax``: a program (chex.set_n_cpu_devices, many scripts) sets
    # XLA_FLAGS after the import and gets that many devices. pmapkit run
    # imports JAX before the program; installing must start nothing.
    script = _script(tmp_path, """
        import os
        import jax
        from jax._src import xla_bridge
        print("started before", bool(xla_bridge._backends))
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
        print("devices", jax.device_count())
        x = jax.device_put(jax.numpy.arange(3.0))
        print("device_buffers", len(x.device_buffers), "local_shards", len(x.local_shards))
        print("device_buffer", x.device_buffer.shape)
    """)
    lines = _ok(_run(RUN + [script], tmp_path))
    assert lines == ["started before False", "devices 3", "device_buffers 1 local_shards 1",
                     "device_buffer (3,)"]


def test_classic_pjit_and_maps_imports_warn_of_nothing(tmp_path):
    # Classic `from jax.experimental import maps` warned of nothing; a suite
    # run with warnings as errors (flax's pytest.ini) stops at any warning
    # pmapkit's served modules would trigger in JAX (its deprecated
    # jax.interpreters.pxla.thread_resources).
    script = _script(tmp_path, """
        import warnings
        warnings.simplefilter("error")
        import numpy as np
        import jax
        from jax.experimental import PartitionSpec, maps
        from jax.experimental.pjit import pjit, with_sharding_constraint
        mesh = maps.Mesh(np.array(jax.devices()[:2]), ("x",))
        with mesh:
            print("mesh", dict(maps.thread_resources.env.physical_mesh.shape))
            f = pjit(lambda a: with_sharding_constraint(a * 2, PartitionSpec("x")),
                     in_axis_resources=PartitionSpec("x"),
                     out_axis_resources=PartitionSpec("x"))
            print(f(np.arange(4.0)).tolist())
    """)
    assert _ok(_run(RUN + [script], tmp_path)) == ["mesh {'x': 2}", "[0.0, 2.0, 4.0, 6.0]"]


def test_xla_client_local_backends_is_read_live_as_chex_reads_it(tmp_path):
    # chex.set_n_cpu_devices (2021) reads jax.lib.xla_client._local_backends:
    # classic jaxlib kept it None until the first backend started, then a
    # table by platform; chex refuses a new device count only after that.
    script = _script(tmp_path, """
        import os
        import jax
        from jax.lib import xla_client
        print("before", xla_client._local_backends)
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
        jax.numpy.ones(2).block_until_ready()
        started = xla_client._local_backends
        print("after", sorted(started), started["cpu"].device_count())
    """)
    assert _ok(_run(RUN + [script], tmp_path)) == ["before None", "after ['cpu'] 4"]


def test_pure_callback_under_vmap_keeps_the_classic_default(tmp_path):
    # jax 0.4.30 printed [0. 0.841471 0.9092974] and [(3,)] for this script:
    # once per element by default, one batched call with vectorized=True.
    script = _script(tmp_path, """
        import jax, jax.numpy as jnp, numpy as np
        shape = jax.ShapeDtypeStruct((), np.float32)
        print(jax.vmap(lambda x: jax.pure_callback(np.sin, shape, x))(jnp.arange(3.)))
        calls = []
        def cb(x):
            calls.append(x.shape)
            return np.sin(x)
        jax.vmap(lambda x: jax.pure_callback(cb, shape, x, vectorized=True))(jnp.arange(3.))
        jax.vmap(lambda x: jax.pure_callback(cb, shape, x, vmap_method="expand_dims"))(
            jnp.arange(2.))
        print(calls)
        try:
            jax.pure_callback(cb, shape, 1.0, vectorized=True, vmap_method="sequential")
        except TypeError as e:
            print("TypeError", "not both" in str(e))
    """)
    assert _ok(_run(RUN + [script], tmp_path)) == [
        "[0.        0.841471  0.9092974]", "[(3,), (2,)]", "TypeError True"]
    plain = _run([sys.executable, script], tmp_path)
    assert plain.returncode == 1 and "NotImplementedError" in plain.stderr


def test_stacking_functions_take_lists_and_tuples_as_the_classic_releases_did(tmp_path):
    # Each line below is what jax 0.4.30 printed for this script: the value,
    # dtype and weak type, and the DeprecationWarnings shown at the call
    # (0.4.30 warned for atleast_*d from inside its jit, not at the caller).
    script = _script(tmp_path, """
        import warnings
        import jax, jax.numpy as jnp, numpy as np
        a = jnp.arange(3.)
        def show(r):
            return [(np.asarray(x).tolist(), str(x.dtype), bool(x.weak_type))
                    for x in (r if isinstance(r, list) else [r])]
        calls = [
            lambda: jnp.vstack([(a,), (a,)]),         # the 1-tuples vjp returns
            lambda: jnp.vstack([[1, 2], [3., 4.]]),
            lambda: jnp.hstack([(1, 2), a]),
            lambda: jnp.dstack([[1, 2]]),
            lambda: jnp.column_stack([[1, 2], (3, 4)]),
            lambda: jnp.atleast_1d([1, 2]),
            lambda: jnp.atleast_2d((1., 2.)),
            lambda: jnp.atleast_3d([1.]),
            lambda: jnp.atleast_1d([1], 2.),
            lambda: jnp.vstack([[1, 2]], dtype=jnp.float16),
            lambda: jax.jit(lambda x: jnp.vstack([(x,), (x,)]))(a),
            lambda: jnp.trim_zeros([0, 1, 2, 0]),
        ]
        for call in calls:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                r = call()
            print(show(r), sorted({str(w.message).split(" requires")[0] for w in seen
                                   if w.category is DeprecationWarning
                                   and w.filename == __file__}))
        # a generator, as JAX took one until 0.4.16 (its vstack read it once)
        print(jnp.vstack(x for x in (a, a + 1)).tolist())
    """)
    assert _ok(_run(RUN + [script], tmp_path)) == [
        "[([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]], 'float32', False)] ['vstack']",
        "[([[1.0, 2.0], [3.0, 4.0]], 'float32', False)] ['vstack']",
        "[([1.0, 2.0, 0.0, 1.0, 2.0], 'float32', False)] ['hstack']",
        "[([[[1], [2]]], 'int32', False)] ['dstack']",
        "[([[1, 3], [2, 4]], 'int32', False)] ['column_stack']",
        "[([1, 2], 'int32', False)] []",
        "[([[1.0, 2.0]], 'float32', False)] []",
        "[([[[1.0]]], 'float32', False)] []",
        "[([1], 'int32', False), ([2.0], 'float32', True)] []",
        "[([[1.0, 2.0]], 'float16', False)] ['vstack']",
        "[([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]], 'float32', False)] ['vstack']",
        "[([1, 2], 'int32', False)] []",
        "[[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]"]
    plain = _run([sys.executable, script], tmp_path)
    assert plain.returncode == 1 and "TypeError: vstack requires ndarray" in plain.stderr


def test_an_unhashable_static_argument_is_keyed_by_identity_as_before_jax_026(tmp_path):
    # JAX <= 0.2.5 (api_util.wrap_hashably / WrapHashably): an unhashable
    # static argument keyed the cache by id(); the same list again reused the
    # trace, an equal new list traced again. JAX 0.2.6 and later refuse it.
    script = _script(tmp_path, """
        from functools import partial
        import jax, jax.numpy as jnp
        traces = []
        @partial(jax.jit, static_argnums=(0, -1))
        def f(limits, x, n):
            traces.append(type(limits).__name__)
            return x * limits[0] + n
        limits = [-2, 2]
        x = jnp.ones(2)
        print(f(limits, x, 1).tolist(), f(limits, x, 1).tolist(), len(traces))
        print(f([-2, 2], x, 1).tolist(), len(traces))          # equal, not the same
        print(f((3,), x, 1).tolist(), f((3,), x, 1).tolist(), len(traces))  # hashable
        print(traces, f.__name__, "jit_f" in f.lower(limits, x, 1).as_text())
        class Model:
            @partial(jax.jit, static_argnums=(0, 2))
            def apply(self, x, sizes):
                return x * len(sizes)
        print(Model().apply(x, [1, 2, 3]).tolist())
        g = jax.jit(static_argnums=1)(lambda x, s: x + s[1])   # factory form
        print(g(x, [5, 7]).tolist(), type(jax.jit(lambda v: v)).__name__)
        try:
            f(limits, x)
        except TypeError as e:
            print("TypeError", "missing 1 required positional argument" in str(e))
    """)
    assert _ok(_run(RUN + [script], tmp_path)) == [
        "[-1.0, -1.0] [-1.0, -1.0] 1",
        "[-1.0, -1.0] 2",
        "[4.0, 4.0] [4.0, 4.0] 3",
        "['list', 'list', 'tuple'] f True",
        "[3.0, 3.0]",
        "[8.0, 8.0] PjitFunction",
        "TypeError True"]
    plain = _run([sys.executable, script], tmp_path)
    assert plain.returncode == 1 and "Non-hashable static arguments" in plain.stderr


def test_make_mesh_axes_are_auto_as_from_jax_0431_to_09(tmp_path):
    # jax.make_mesh (0.4.31-0.9) built Mesh(..., axis_types=None): every axis
    # Auto; JAX 0.10 made Explicit its default. jax 0.4.30 (no make_mesh) gave
    # [48.0, ..., 76.0] and PartitionSpec('x',) for this program on
    # Mesh(mesh_utils.create_device_mesh((2, 4)), ("x", "y")).
    script = _script(tmp_path, """
        import jax, jax.numpy as jnp
        from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((2, 4), ("x", "y"))
        print(mesh.axis_types, jax.make_mesh((8,), ("x",), (AxisType.Explicit,)).axis_types)
        arr = jax.device_put(jnp.arange(32.).reshape(4, 8), NamedSharding(mesh, P("x", "y")))
        @jax.jit
        def f(x):
            return jax.lax.with_sharding_constraint(x.sum(axis=0), NamedSharding(mesh, P("x")))
        out = f(arr)
        print(out.tolist(), out.sharding.spec)
    """)
    assert _ok(_run(RUN + [script], tmp_path)) == [
        "(Auto, Auto) (Explicit,)",
        "[48.0, 52.0, 56.0, 60.0, 64.0, 68.0, 72.0, 76.0] P('x',)"]
    plain = _run([sys.executable, script], tmp_path)
    assert plain.returncode == 1 and "can only refer to Auto axes" in plain.stderr
