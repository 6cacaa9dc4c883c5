"""Issue 57: a classic pjit with literal specs migrates to what a JAX engineer
writes, ``jax.jit(f, in_shardings=..., out_shardings=...)`` (``pjit_plan``),
and runs as the classic one did; ``_pjit`` stays only where a site needs it."""
import os
import re
import textwrap

import jax
import numpy as np
import pytest

from pmapkit.tools.migrate import migrate_source

from _migrate_helpers import HERE, migrate, run_migrated, without_helpers

PROGRAMS = os.path.join(HERE, "migrate_handwritten")
PJIT_PROGRAM = os.path.join(PROGRAMS, "pjit_literal_specs.py")

_HEAD = ("import numpy as np\nimport jax\nimport jax.numpy as jnp\n"
         "from jax.experimental import PartitionSpec as P\n"
         "from jax.experimental.maps import Mesh\nfrom jax.experimental.pjit import pjit\n"
         "devices = np.array(jax.devices()).reshape(4, 2)\n")


def _migrated(body):
    new, report = migrate_source(_HEAD + textwrap.dedent(body))
    return new, report


def test_the_pjit_program_prints_what_classic_pjit_printed(tmp_path):
    proc = migrate(PJIT_PROGRAM, "-o", str(tmp_path), "--check", "--strict")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"check {PJIT_PROGRAM}: same: exit status 0, 7 stdout lines" in proc.stdout
    text = (tmp_path / "pjit_literal_specs.py").read_text()
    code = without_helpers(text)
    # six sites are jax.jit with in_shardings (a None written P()); the one whose
    # specs are a parameter (None at run time: replicated) keeps the helper, once
    assert code.count(" = jax.jit(") == 4 and code.count("@partial(jax.jit, ") == 1
    assert code.count("in_shardings=") == 8 and "= pjit(" not in code
    assert "@partial(jax.jit, in_shardings=(P(\"x\"), P()), out_shardings=P())" in code
    assert text.count("def _pjit(") == 1 and code.count("_pjit(") == 1
    assert "return _pjit(lambda v: v + 0, in_shardings=spec, out_shardings=spec)(a)" in code
    # P(*names) is a PartitionSpec whatever its entries; a, a parameter, is put there
    assert ("return jax.jit(lambda v: v, in_shardings=P(*names), "
            "out_shardings=P(*names))(jax.device_put(a, P(*names)))") in code
    # the array jnp made under the mesh (committed after migrate) is put at the call
    assert "d = double(jax.device_put(made, spec))" in code
    assert "lambda fun" not in code and "jax.jit(jax.jit" not in code


def test_numpy_arguments_go_to_jax_jit_as_they_are():
    new, report = _migrated('''\
        step = pjit(lambda a, b: a @ b, in_axis_resources=(P("x", None), None),
                    out_axis_resources=P("x", None))
        a = np.ones((8, 4)).astype(np.float32)
        with Mesh(devices, ("x", "y")):
            out = step(a * 2, np.eye(4))
        ''')
    assert report.helpers == [] and report.left == []
    assert "jax.device_put" not in new
    assert 'step = jax.jit(lambda a, b: a @ b, in_shardings=(P("x", None), P()),' in new
    ns = {}
    exec(compile(new, "migrated.py", "exec"), ns)
    assert ns["out"].sharding.spec == jax.P("x", None)
    assert np.asarray(ns["out"]).tolist() == [[2.0] * 4] * 8


def test_an_argument_jnp_made_under_the_mesh_is_put_where_its_spec_says():
    # Under jax.set_mesh an array jnp makes is committed, replicated over the mesh:
    # plain jax.jit refuses it for another spec; classic pjit moved it, and so does
    # the jax.device_put written at the call.
    ns, new, report = run_migrated(_HEAD + textwrap.dedent('''\
        step = pjit(lambda a: a + 1, in_axis_resources=P("x"), out_axis_resources=P("x"))
        with Mesh(devices, ("x", "y")):
            made = jnp.arange(8.0)
            out = step(made)
            twice = step(made * 2)      # jnp's arithmetic: committed too
            host = step(np.arange(8.0) * 2)
        '''))
    assert report.helpers == [] and "out = step(jax.device_put(made, P(\"x\")))" in new
    assert "twice = step(jax.device_put(made * 2, P(\"x\")))" in new
    assert "host = step(np.arange(8.0) * 2)" in new
    assert np.asarray(ns["twice"]).tolist() == np.asarray(ns["host"]).tolist()
    assert np.asarray(ns["out"]).tolist() == [float(k + 1) for k in range(8)]
    assert ns["out"].sharding.spec == jax.P("x")
    # the rule's reason, as a fact: without the put, jax.jit refuses the argument
    bare = new.replace('jax.device_put(made, P("x"))', "made")
    with pytest.raises(ValueError, match="does not match the sharding"):
        exec(compile(bare, "bare.py", "exec"), {})


@pytest.mark.parametrize("body, why", [
    ('def make(spec):\n    return pjit(lambda a: a, in_axis_resources=spec, '
     'out_axis_resources=None)\n', "specs read at run time (None or not)"),
    ('f = pjit(lambda a: a, in_axis_resources=P("x"), out_axis_resources=None)\nprint(f)\n',
     "the pjit printed: classic pjit's wrapped function"),
    ('f = pjit(lambda a, b: a, in_axis_resources=P("x"), out_axis_resources=None)\n'
     'y = f(np.ones(8), b=np.ones(8))\n', "a keyword argument"),
    ('f = pjit(lambda a: a, in_axis_resources=((P("x"), P("x")),), out_axis_resources=None)\n'
     'y = f(pair)\n', "a tree spec for an argument made elsewhere"),
    ('f = pjit(lambda a, n: a * n, in_axis_resources=P("x"), out_axis_resources=None, '
     'static_argnums=1)\n', "a static argument"),
])
def test_a_site_that_needs_the_helper_keeps_it_once(body, why):
    new, report = _migrated(body + body.replace("f = ", "g = ").replace("f(", "g(")
                            .replace("print(f)", "print(g)"))
    assert report.helpers == ["_pjit"], why
    assert new.count("def _pjit(") == 1 and "jax.jit(lambda" not in new, why


def test_a_name_bound_to_pjit_and_to_something_else_keeps_the_helper():
    new, report = _migrated('''\
        f = pjit(lambda a: a, in_axis_resources=P("x"), out_axis_resources=None)
        f = jax.jit(lambda a: a)
        y = f(np.ones(8))
        ''')
    assert report.helpers == ["_pjit"]
    assert re.search(r"f = _pjit\(lambda a: a, in_shardings=P\(\"x\"\)", new)


# -- pmap as named defs ----------------------------------------------------------------

NAMED_DEFS_PROGRAM = os.path.join(PROGRAMS, "pmap_named_defs.py")


def test_the_named_defs_program_prints_what_classic_pmap_printed(tmp_path):
    proc = migrate(NAMED_DEFS_PROGRAM, "-o", str(tmp_path), "--check", "--strict")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"check {NAMED_DEFS_PROGRAM}: same: exit status 0, 3 stdout lines" in proc.stdout
    text = (tmp_path / "pmap_named_defs.py").read_text()
    # no helper at all: statics and a pmap of a def of the file are ordinary named defs
    assert not re.search(r"^def _", text, re.M) and "_per_device" not in text
    assert "lambda fun" not in text and "_first_devices" not in text
    assert "jax.pmap" not in text and "jax.jit(jax.jit" not in text
    assert ('@functools.partial(jax.jit, static_argnums=(1, 2))\n'
            'def powers(v, k, mode):\n'
            '    """v ** k or v * k, normalised over the devices."""\n'
            '    @functools.partial(jax.shard_map, ') in text
    assert "    def per_device(v):\n        v = jax.tree.map(" in text
    assert "    return per_device(v)\n" in text
    assert ("    @functools.partial(jax.jit, static_argnums=(0,))\n"
            "    def step(self, v, bias):\n") in text
    assert "        return per_device(v, bias)\n" in text
    assert ("def parallel_square(v, w):\n"
            "    v = jax.tree.map(lambda a: jax.numpy.squeeze(a, 0), v)\n"
            "    return jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0), square(v, w))\n") in text
    assert "@functools.partial(jax.jit, static_argnums=(1,))\ndef scaled(v, k):\n" in text


@pytest.mark.parametrize("define", [
    "def f(v, k=2):\n    return v ** k\n",        # a default: the call may leave it out
    "@jax.jit\ndef f(v):\n    return v ** 2\n",   # decorated: not a plain def
    "f = lambda v: v ** 2\n",                     # not a def of the file
])
def test_a_pmap_of_a_name_not_a_plain_def_keeps_the_per_device_helper(define):
    new, report = migrate_source("import jax\n\n\n" + define + "\n\np = jax.pmap(f)\n")
    assert report.helpers == ["_per_device"] and "_per_device(f)" in new, new


@pytest.mark.parametrize("source, size", [
    # x.reshape(n, 3) is a method: its leading size is n, the device count
    ("n = jax.local_device_count()\nx = np.arange(n * 3.0).reshape(n, 3)\n", None),
    ("x = np.arange(24.0).reshape(8, 3)\n", 8),       # a number: maybe not the count
    # jnp.reshape(a, (4, 2)): the function, its shape the second argument
    ("x = jnp.reshape(jnp.arange(8.0), (4, 2))\n", 4),
    ("x = np.arange(12.0).reshape(4, 3)\n", 4),
])
def test_a_mapped_size_is_read_from_a_reshape_method_as_from_the_function(source, size):
    source = source + "y = jax.pmap(lambda v: v * 2)(x)\n"
    namespace, new, report = run_migrated(
        "import jax\nimport jax.numpy as jnp\nimport numpy as np\n" + source)
    # the size written (the site's one array, x, bound once): that many devices
    assert report.helpers == [] and (f"jax.local_devices()[:{size}]" in new) is (size is not None)
    assert ("jax.local_devices()[:" in new) is (size is not None), new
    np.testing.assert_array_equal(np.asarray(namespace["y"]), np.asarray(namespace["x"]) * 2)


def test_the_files_own_partial_is_used_and_no_functools_import_added():
    source = ("from functools import partial as p\nimport jax\nimport numpy as np\n\n\n"
              "@p(jax.pmap, axis_name='i')\ndef f(x):\n    return x / jax.lax.psum(x, 'i')\n\n\n"
              "out = f(np.arange(8.0) + 1)\n")
    namespace, new, report = run_migrated(source)
    assert "import functools" not in new and "functools." not in new
    assert "@p(jax.shard_map, mesh=" in new and report.helpers == []
    x = np.arange(1.0, 9.0)
    np.testing.assert_allclose(np.asarray(namespace["out"]), x / x.sum())
    import pmapkit
    np.testing.assert_allclose(np.asarray(namespace["out"]),
                               np.asarray(pmapkit.pmap(lambda v: v / jax.lax.psum(v, "i"),
                                                       axis_name="i")(x)))
    # a file that reads functools itself keeps its spelling and gets the import
    new, report = migrate_source(
        "from functools import partial\nimport jax\n\nw = functools.wraps\n\n\n"
        "@partial(jax.pmap, axis_name='i')\ndef f(x):\n    return x / jax.lax.psum(x, 'i')\n")
    assert "import functools" in new and "@functools.partial(jax.shard_map, mesh=" in new


@pytest.mark.parametrize("rebinding", [
    "def g(p):\n    return p\n",                # a parameter
    "p = print\n",                              # a later assignment
    "def g():\n    from functools import partial as p\n    return p\n",  # a nested import
])
def test_a_partial_name_bound_elsewhere_is_not_borrowed(rebinding):
    new, report = migrate_source(
        "from functools import partial as p\nimport jax\n\n\n" + rebinding
        + "\n\n@jax.pmap\ndef f(x):\n    return x * 2\n")
    assert "@p(" not in new and "@functools.partial(jax.shard_map, " in new, new
    assert "import functools" in new


# -- a pmap's body in place, meshes of a written size, a pjit output's shards --------------

def _checked(tmp_path, name, lines):
    path = os.path.join(PROGRAMS, name)
    proc = migrate(path, "-o", str(tmp_path), "--check", "--strict")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"check {path}: same: exit status 0, {lines} stdout lines" in proc.stdout
    return (tmp_path / name).read_text()


def test_pmaps_called_where_made_run_their_body_in_place(tmp_path):
    text = _checked(tmp_path, "pmap_in_place.py", 8)
    assert "_per_device(" not in text and "_first_devices(" not in text
    assert text.count("lambda *args: jax.tree.map(") == 5
    # one axis per argument: the mapped one squeezed, the other passed as it is
    assert "scale(jax.tree.map(lambda v: jnp.squeeze(v, 0), x0), x1)" in text
    # out_axes=None: what the body returns, as it is
    assert "lambda *args: (lambda v: jnp.sum(v))(*jax.tree.map(" in text
    # the def of *args takes the axis off args as one tree
    assert "    args = jax.tree.map(lambda v: jnp.squeeze(v, 0), args)\n" in text


def test_sites_of_a_written_size_get_that_many_devices(tmp_path):
    text = _checked(tmp_path, "pmap_literal_sizes.py", 5)
    assert "_first_devices(" not in text and "_per_device(" not in text
    assert text.count("jax.local_devices()[:4]") == 2
    assert text.count("jax.local_devices()[:2]") == 2


def test_a_pjit_outputs_device_buffers_are_its_shards_as_they_are(tmp_path):
    text = _checked(tmp_path, "pjit_device_buffers.py", 4)
    assert "_device_buffers(" not in text
    assert text.count("[s.data for s in data.addressable_shards]") == 4


_PMAP_HEAD = "import jax\nimport jax.numpy as jnp\n\n"


@pytest.mark.parametrize("body", [
    # made here, called later: f is read when the body is traced, after f changed
    "def f(x):\n    return x\n\n\np = jax.pmap(f)\nf = None\n",
    "p = jax.pmap(obj.method)\n",
    # a lambda's default is read when the lambda is made
    "p = jax.pmap(lambda x, k=k: x * k)\n",
    "y = jax.pmap(make())(x)\n",                         # a call: made where the body is traced
    "y = jax.pmap(lambda x: x, in_axes=({'a': 0},))(x)\n",   # a tree of axes
])
def test_a_body_in_place_needs_the_function_as_it_was_made(body):
    new, report = migrate_source(_PMAP_HEAD + body)
    assert "_per_device" in report.helpers, new


@pytest.mark.parametrize("body", [
    "y = f(jnp.arange(4.))\nz = f(jnp.arange(2.))\n",          # two sizes
    "y = f(jnp.arange(4.))\ng = f\n",                          # f passed on as a value
    "y = f(jnp.arange(4.))\nw = jax.pmap(lambda v: v)(batch)\n",   # a size not written
    "a = jnp.arange(4.)\na = jnp.arange(8.)\ny = f(a)\n",        # a name bound twice
    "y = f(jnp.arange(1, 5))\n",                               # arange(start, stop)
])
def test_a_mesh_of_a_written_size_needs_every_site_to_say_it(body):
    new, report = migrate_source(
        _PMAP_HEAD + "@jax.pmap\ndef f(x):\n    return x * 2\n\n\n" + body)
    assert "_first_devices" in report.helpers and "local_devices()[:" not in new, new


@pytest.mark.parametrize("body", [
    "data = g(x)\n",                          # g is not a pjit
    "data = f(x)\ndata = other(x)\n",         # data bound to something else too
    "f = g\ndata = f(x)\n",                   # f bound to something else too
])
def test_device_buffers_of_what_may_not_be_a_pjit_output_keep_the_helper(body):
    new, report = migrate_source(
        "import jax\nfrom jax.experimental.pjit import pjit\n"
        "f = pjit(lambda a: a, in_axis_resources=None, out_axis_resources=None)\n"
        + body + "print(data.device_buffers)\n")
    assert "_device_buffers" in report.helpers, new


def test_a_partial_imported_below_a_use_is_not_borrowed():
    # a notebook imports partial in a later cell: the decorator above runs first
    namespace, new, report = run_migrated(
        "import jax\nimport jax.numpy as jnp\n\n\n@jax.pmap\ndef f(x):\n    return x * 2\n\n\n"
        "y = f(jnp.arange(8.0))\n\nfrom functools import partial\n\n\n"
        "@partial(jax.pmap, axis_name='i')\ndef g(x):\n    return x / jax.lax.psum(x, 'i')\n\n\n"
        "z = g(jnp.arange(8.0))\n")
    assert "import functools" in new and "@functools.partial(jax.shard_map" in new
    np.testing.assert_array_equal(np.asarray(namespace["y"]), np.arange(8.0) * 2)
    np.testing.assert_allclose(np.asarray(namespace["z"]), np.arange(8.0) / 28.0)
