"""``pmapkit migrate`` never claims more than it did: "0 left" only when the
migrated file holds nothing classic (the output is scanned against the census,
JAX's own deprecations and what this JAX has), ``--strict`` exits 1 otherwise;
``--check`` exits 0 only when both runs succeed and agree (UNPROVEN when the
original fails, with the original's own last error line); deprecated modern
spellings are migrated too, so the output runs with DeprecationWarnings as
errors."""
import os
import textwrap

import pytest

from pmapkit.tools.migrate import command, leftovers, migrate_source

from _migrate_helpers import migrate, verdicts, without_helpers


def _left(source):
    new, report = migrate_source(textwrap.dedent(source))
    return new, [(k.line, k.name) for k in report.left], report


# -- "0 left" means it ---------------------------------------------------------------

@pytest.mark.parametrize("source, line, name, why", [
    # a star import of a classic module: nothing it binds can be followed
    ("from jax.experimental.maps import *\nmesh = Mesh(d, ('x',))\n",
     1, "jax.experimental.maps", "star import of jax.experimental.maps: removed in JAX"),
    # a removed name read where no rule reaches it (an import nothing reads is
    # dropped: test_migrate_translate)
    ("from jax import soft_pmap\nf = soft_pmap\n", 2, "jax.soft_pmap", "removed in JAX 0.3.18"),
    ("import jax.experimental.host_callback\n", 1, "jax.experimental.host_callback",
     "removed in JAX"),
    # deprecated by JAX 0.10 itself, with no drop-in: it would warn
    ("import jax\nc = jax.core.call\n", 2, "jax.core.call", "deprecated in JAX 0.10.2"),
    # not a name of any census era, and gone
    ("import jax\nx = jax.interpreters.sharded_jit\n", 2, "jax.interpreters.sharded_jit",
     "removed in JAX 0.3.11..0.3.25"),
    ("from jax.interpreters.sharded_jit import sharded_jit\nf = sharded_jit\n", 2,
     "jax.interpreters.sharded_jit.sharded_jit", "removed in JAX 0.3.11..0.3.25"),
    # a name no census release had and this JAX lacks
    ("import jax\nx = jax.experimental.no_such_thing\n", 2, "jax.experimental.no_such_thing",
     "not in JAX 0.10.2"),
])
def test_whatever_classic_stays_in_the_output_is_a_left_line(source, line, name, why):
    new, left, report = _left(source)
    assert left == [(line, name)], report.format()
    assert why in report.left[0].why
    assert "0 left" not in report.format()


def test_a_leftover_after_rewrites_gives_its_line_in_the_migrated_file():
    new, left, report = _left('''\
        import jax
        from jax.experimental import host_callback as hcb
        from jax.experimental.maps import *

        y = hcb.id_tap(tap, jax.tree_map(f, x))
        ''')
    assert sorted(r.old for r in report.rewrites) == ["hcb.id_tap(tap, jax.tree_map(f, x))",
                                                "jax.tree_map"]
    out_line = new.splitlines().index("from jax.experimental.maps import *") + 1
    assert left == [(out_line, "jax.experimental.maps")]
    assert report.left[0].why.endswith(f"(line {out_line} of the migrated file)")


def test_names_and_modules_of_this_jax_are_not_leftovers():
    # modern names, kept pmaps, names the scan cannot look up without
    # running a module that needs another package: none is classic
    assert leftovers.scan(textwrap.dedent('''\
        import jax
        import jax.numpy as jnp
        from jax.experimental import jax2tf, io_callback
        from jax.sharding import PartitionSpec as P
        from jax.experimental.jax2tf import convert

        f = jax.pmap(lambda x: x, in_axes=1)
        y = jnp.float32(1).dtype, jax.tree.map(f, [1]), jax.lax.psum, P("x")
        ''')) == []


def test_strict_exits_1_when_only_the_scan_finds_something(tmp_path, capsys):
    path = tmp_path / "star.py"
    path.write_text("import jax\nfrom jax.experimental.maps import *\n"
                    "print(jax.tree_map(abs, [-1]))\n")
    status = command.main([str(path), "-o", str(tmp_path / "out"), "--strict"])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert "1 file(s): 1 rewritten, 1 left, 0 pmap kept" in out
    assert "LEFT          jax.experimental.maps: star import" in out
    assert "--strict: 1 place(s) left untranslated" in err


# -- deprecated modern spellings -------------------------------------------------------

def test_experimental_shard_map_check_rep_and_jax_partial_become_current():
    new, left, report = _left('''\
        import functools
        import jax
        from jax import partial
        from jax.experimental.shard_map import shard_map
        from jax.core import Effect


        g = shard_map(f, mesh,  # the mesh
                      P("i"), P("i"), check_rep=False)
        h = shard_map(f, mesh, in_specs=P("i"), out_specs=P(), auto=frozenset({"j"}))
        k = jax.shard_map(f, mesh=mesh, in_specs=P(), out_specs=P(), check_rep=True)


        @functools.partial(shard_map, mesh=mesh, in_specs=P("i"), out_specs=P())
        def body(x):
            return partial(f, x), Effect
        ''')
    assert without_helpers(new) == textwrap.dedent('''\
        import functools
        import jax
        from functools import partial
        from jax.extend.core import Effect


        g = jax.shard_map(f, mesh=mesh,  # the mesh
                      in_specs=P("i"), out_specs=P("i"), check_vma=False)
        h = jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P(), axis_names=frozenset(mesh.axis_names) - frozenset(frozenset({"j"})))
        k = jax.shard_map(f, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=True)


        @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P())
        def body(x):
            return partial(f, x), Effect
        ''')
    assert left == [] and len(report.rewrites) == 6


def test_a_shard_map_passed_around_is_left_with_why():
    new, left, report = _left('''\
        from jax.experimental.shard_map import shard_map
        smap = shard_map
        ''')
    assert left == [(2, "jax.experimental.shard_map.shard_map")]
    assert "use jax.shard_map(f, mesh=..." in report.left[0].why


SAME = textwrap.dedent('''\
    import functools
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax.experimental.shard_map import shard_map
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:4]), ("i",))


    @functools.partial(shard_map, mesh=mesh, in_specs=P("i"), out_specs=P(), check_rep=False)
    def total(x):
        return jax.lax.psum(x.sum(), "i")


    double = shard_map(lambda x: 2 * x, mesh, P("i"), P("i"))
    print(total(jnp.arange(8.0)), jax.tree_map(lambda a: a.tolist(), double(jnp.ones(4))))
    ''')
FAILS = textwrap.dedent('''\
    import jax
    print(jax.tree_map(lambda a: a + 1, [1, 2]))
    raise ValueError("the original's own error")
    ''')
QUIET = "import sys\nimport jax\nprint(jax.tree_map(abs, [-1]))\nsys.exit(3)\n"


def test_check_proves_only_runs_that_succeed_and_agree(tmp_path):
    # One --check over three programs (one run after another): a deprecated
    # modern spelling migrated and run with DeprecationWarnings as errors
    # (same); an original that raises and one that exits 3 saying nothing
    # (UNPROVEN: never "same", never pmapkit's start-up line as the error).
    for name, text in (("same.py", SAME), ("fails.py", FAILS), ("quiet.py", QUIET)):
        (tmp_path / name).write_text(text)
    proc = migrate(str(tmp_path), "--check", "--in-place")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = verdicts(proc.stdout)
    assert found == {str(tmp_path / "fails.py"): "UNPROVEN",
                     str(tmp_path / "quiet.py"): "UNPROVEN",
                     str(tmp_path / "same.py"): "same"}, proc.stdout
    lines = {line.split(":")[0]: line for line in proc.stdout.splitlines()
             if line.startswith("check ")}
    assert ("the original failed (exit status 1): ValueError: the original's own error; "
            "the migrated run failed too: ValueError: the original's own error; nothing "
            "is proved") in lines[f"check {tmp_path / 'fails.py'}"]
    assert ("the original failed (exit status 3): <nothing on stderr>; the migrated run "
            "failed too: <nothing on stderr>") in lines[f"check {tmp_path / 'quiet.py'}"]
    assert "pmapkit.legacy" not in proc.stdout
    # not proved: --in-place wrote nothing
    assert "did not prove every file: nothing written in place" in proc.stderr
    assert (tmp_path / "same.py").read_text() == SAME
    assert sorted(os.listdir(tmp_path)) == ["fails.py", "quiet.py", "same.py"]


def test_nothing_migrate_writes_is_classic_or_deprecated():
    # Every spelling a rule writes (moves, census renames, names, JAX's own
    # drop-ins) and every helper's source holds nothing the scan would flag.
    from pmapkit.tools.migrate import deprecations, helpers, transformer
    moves, names, _calls, _attributes, _reasons = transformer.tables()
    targets = {target for _family, target in moves.values()}
    targets |= {text.split("(")[0] for _family, text in names.values()}
    targets |= {deprecations.modern(q) for q in ("jax.core.Effect", "jax.core.new_jaxpr_eqn")}
    assert None not in targets and "jax.extend.core.Effect" in targets
    flagged = {t: leftovers.classic(t) for t in targets if t.startswith("jax.")}
    assert {t: hit for t, hit in flagged.items() if hit} == {}
    for helper in helpers.ALL.values():
        source = "import functools\nimport jax\nimport numpy\n" + helper.source
        assert leftovers.scan(source) == [], helper.name


def test_a_rewritten_dotted_name_imports_its_module(tmp_path):
    # ``import jax`` loads neither jax.extend nor jax.example_libraries: a
    # reference rewritten into them imports the module, and the classic
    # dotted import goes. Run in a fresh process, warnings as errors, with
    # the list of subpackages a bare ``import jax`` loads checked there too.
    import subprocess
    import sys

    from pmapkit.tools.migrate import transformer
    new, left, report = _left('''\
        import jax
        import jax.experimental.optimizers

        effect = jax.core.Effect
        init, update, get = jax.experimental.optimizers.sgd(0.1)
        ''')
    assert new == textwrap.dedent('''\
        import jax
        import jax.example_libraries.optimizers
        import jax.extend.core

        effect = jax.extend.core.Effect
        init, update, get = jax.example_libraries.optimizers.sgd(0.1)
        ''')
    assert left == []
    script = tmp_path / "migrated.py"
    script.write_text(new + textwrap.dedent(f'''\
        loaded = {sorted(transformer.LOADED_WITH_JAX)!r}
        print(effect.__name__, [name for name in loaded if name not in vars(jax)])
        '''))
    proc = subprocess.run([sys.executable, "-P", "-W", "error", str(script)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Effect []\n"
