"""``pmapkit migrate`` on Jupyter notebooks: code cells rewritten (the imports
of one cell read in the next, as the kernel does), every other byte kept but
the outputs of rewritten cells, IPython's lines left as they are, a folder
walk finds notebooks, and ``--check`` runs a notebook's code cells in order."""
import json

import pytest

from pmapkit.tools.migrate import command, notebooks
from pmapkit.tools.migrate.transformer import migrate_module


def _cell(kind, source, outputs=(), count=None, **metadata):
    cell = {"cell_type": kind, "metadata": metadata, "source": source}
    if kind == "code":
        cell.update(execution_count=count, outputs=list(outputs))
    return cell


OUT = {"name": "stdout", "output_type": "stream", "text": ["[2]\n"]}

CELLS = [
    _cell("markdown", ["# Trees é \u2014 old API\n", "Uses `jax.tree_map`."]),
    _cell("code", ["%matplotlib inline\n", "import jax\n", "import jax.numpy as jnp"],
          [OUT], 1, tags=["setup"]),
    _cell("code", ["print(jax.tree_map(lambda a: a + 1, [1]))\n", "!ls -l\n", "if True:\n",
                   "    %time y = jnp.ones(3)"], [OUT], 2),
    _cell("code", "%%time\nprint(jax.tree_map(len, ['a']))", [OUT], 3),
    _cell("code", ["print('untouched')"], [OUT], 4),
]


def _notebook(cells=CELLS):
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}, "z": [1, 2]},
            "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.parametrize("layout", [
    dict(indent=1, sort_keys=True, ensure_ascii=False),     # nbformat's own
    dict(indent=2, sort_keys=False, ensure_ascii=True)])
def test_code_cells_are_rewritten_and_every_other_byte_kept(layout):
    text = json.dumps(_notebook(), **layout) + "\n"
    new, report = notebooks.migrate_notebook(text, "nb.ipynb", migrate_module)
    # one rewrite, in the third cell (its first line): the import of the second read
    assert [(format(r.line), r.old, r.new) for r in report.rewrites] == [
        ("cell 3:1", "jax.tree_map", "jax.tree.map")] and report.left == []
    expected = _notebook([dict(c) for c in CELLS])
    expected["cells"][2] = dict(CELLS[2], outputs=[], execution_count=None, source=[
        "print(jax.tree.map(lambda a: a + 1, [1]))\n", "!ls -l\n", "if True:\n",
        "    %time y = jnp.ones(3)"])
    assert new == json.dumps(expected, **layout) + "\n"
    # nothing to rewrite: the very text back
    again, report = notebooks.migrate_notebook(new, "nb.ipynb", migrate_module)
    assert again == new and report.rewrites == []


def test_a_cell_magic_keeps_its_cell_and_a_helper_lands_after_the_imports():
    cells = [_cell("code", ["import numpy as np\n", "import jax\n",
                            "from jax.experimental import host_callback as hcb"], [OUT], 1),
             _cell("code", "%%time\nprint(jax.tree_map(len, ['a']))", [OUT], 2),
             _cell("code", ["hcb.id_tap(lambda v, t: print(v), np.arange(2))"], [OUT], 3)]
    text = json.dumps(_notebook(cells), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    new, report = notebooks.migrate_notebook(text, "nb.ipynb", migrate_module)
    got = json.loads(new)["cells"]
    assert got[1] == cells[1]
    assert "".join(got[2]["source"]) == "_id_tap(lambda v, t: print(v), np.arange(2))"
    assert "def _id_tap(" in "".join(got[0]["source"]) and got[0]["outputs"] == []
    # the first cell's code, helpers included, runs before the third
    code = "".join(got[0]["source"]) + "\n" + "".join(got[2]["source"])
    namespace = {}
    exec(compile(code + "\njax.effects_barrier()\n", "cells.py", "exec"), namespace)


def _write(folder, name, cells):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_notebook(cells), indent=1, sort_keys=True,
                               ensure_ascii=False) + "\n")
    return path


def test_a_folder_walk_migrates_notebooks_and_skips_checkpoints(tmp_path, capsys):
    src = tmp_path / "src"
    _write(src, "a/trees.ipynb", [_cell("code", "import jax\nprint(jax.tree_map(abs, [-1]))")])
    _write(src, "a/.ipynb_checkpoints/trees-checkpoint.ipynb",
           [_cell("code", "import jax\nprint(jax.tree_map(abs, [-1]))")])
    (src / "plain.py").write_text("import jax\nprint(jax.tree_leaves([1]))\n")
    status = command.main([str(src), "-o", str(tmp_path / "out"), "--strict"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "2 file(s): 2 rewritten, 0 left" in out
    migrated = json.loads((tmp_path / "out/a/trees.ipynb").read_text())
    assert migrated["cells"][0]["source"] == "import jax\nprint(jax.tree.map(abs, [-1]))"
    assert not (tmp_path / "out/a/.ipynb_checkpoints").exists()


def test_check_runs_a_notebooks_code_cells_in_order(tmp_path, capsys):
    path = _write(tmp_path / "src", "nb.ipynb", [
        _cell("markdown", "# steps"),
        _cell("code", "import jax\nsteps = [1, 2]"),
        _cell("code", "steps.append(3)\nprint(jax.tree_map(lambda s: s * 10, steps))"),
        _cell("code", "print(sorted({'b', 'a'}), {'x', 'y', 'z'})")])
    status = command.main([str(path), "--check"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"check {path}: same: exit status 0, 2 stdout lines agree byte for byte" in out


def test_check_refuses_a_notebook_with_ipython_lines(tmp_path, capsys):
    path = _write(tmp_path / "src", "nb.ipynb", [
        _cell("code", "import jax"), _cell("code", "x = 1\n!pip list\nprint(x)")])
    status = command.main([str(path), "--check"])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert ("has 1 IPython line(s) that Python cannot run (cell 2: '!pip list'); nothing "
            "was run") in captured.err


def test_a_file_named_ipynb_that_is_not_a_notebook_is_refused(tmp_path, capsys):
    path = tmp_path / "nb.ipynb"
    path.write_text("print(jax.tree_map(abs, [1]))\n")
    status = command.main([str(path), "--diff"])
    assert status == 2 and "is not a notebook: not JSON" in capsys.readouterr().err
