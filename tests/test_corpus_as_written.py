"""The corpus run as written (tests/migrate_corpus/run_as_written.py): what the
corpus holds, how a notebook is rebuilt to run as a notebook, and the table of
programs that do not run here."""
import csv
import importlib.util
import json
import os
import re
import subprocess

import pytest

_HERE = os.path.join(os.path.dirname(__file__), "migrate_corpus")


def _module(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def aw():
    return _module("corpus_run_as_written", "run_as_written.py")


def _rows(file):
    with open(os.path.join(_HERE, file)) as f:
        return list(csv.DictReader([line for line in f if not line.startswith("#")],
                                   delimiter="\t"))


def test_the_corpus_holds_eighty_public_programs_of_every_kind():
    rows = _rows("programs.tsv")
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names)) >= 80
    assert all(re.fullmatch(r"[0-9a-f]{40}", r["commit"]) for r in rows)
    assert all(re.fullmatch(r"20(19|2[0-4])-\d\d-\d\d", r["date"]) for r in rows)
    assert sum(r["date"] < "2021" for r in rows) >= 15
    assert sum(r["path"].endswith(".ipynb") for r in rows) >= 10
    assert any("ProcessPoolExecutor" in r["uses"] for r in rows)


def test_every_program_that_does_not_run_here_has_a_known_class(aw):
    table = aw.known()
    names = {r["name"] for r in _rows("programs.tsv")}
    assert set(table) <= names
    assert {cls for cls, _ in table.values()} <= set(aw.CLASSES)
    assert all(why.strip() for _, why in table.values())


def test_an_unknown_class_is_refused(aw, tmp_path, monkeypatch):
    (tmp_path / "as_written.tsv").write_text("name\tclass\twhy\nx\tflaky\tsometimes\n")
    monkeypatch.setattr(aw, "HERE", str(tmp_path))
    with pytest.raises(ValueError, match="flaky"):
        aw.known()


def _mirror(tmp_path, notebook):
    repo = tmp_path / "mirrors" / "someone+demo" / "repo"
    repo.mkdir(parents=True)
    (repo / "nb.ipynb").write_text(json.dumps(notebook))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "nb.ipynb"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "nb"], check=True)
    return subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_notebook_stays_a_notebook_without_its_install_lines(aw, tmp_path, monkeypatch):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# title"]},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["!pip install --upgrade -q jax==0.1.54 jaxlib==0.1.37\n",
                         "%pip install flax\n", "colab_tpu.setup_tpu()\n", "x = 6 * 7\n",
                         "%timeit x + 1\n"]},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "x"}]
    commit = _mirror(tmp_path, {"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 4})
    monkeypatch.setattr(aw.run, "MIRRORS", str(tmp_path / "mirrors"))
    monkeypatch.setattr(aw.run, "CACHE", str(tmp_path / "cache"))
    row = {"name": "demo", "repository": "someone/demo", "commit": commit,
           "path": "nb.ipynb", "edit": r"^.*setup_tpu\(\)$ =>"}
    folder, mine, script = aw.rebuild(row)
    assert (mine, script) == ("original.ipynb", "original.py")
    with open(os.path.join(folder, mine)) as f:
        rebuilt = json.load(f)
    assert [c["cell_type"] for c in rebuilt["cells"]] == ["markdown", "code", "code"]
    # the installs and the edited TPU line are gone; IPython's other lines stay
    assert rebuilt["cells"][1]["source"] == "x = 6 * 7\n%timeit x + 1"
    with open(os.path.join(folder, script)) as f:
        shown = subprocess.run(["python3", "-c", f.read()], capture_output=True, text=True)
    assert shown.stdout == "42\n"        # the script shows the last cell's value


def test_a_notebook_of_ipython_syntax_is_run_but_not_compared(aw, tmp_path, monkeypatch):
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "import math\nmath.sqrt?\n"}]
    commit = _mirror(tmp_path, {"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 4})
    monkeypatch.setattr(aw.run, "MIRRORS", str(tmp_path / "mirrors"))
    monkeypatch.setattr(aw.run, "CACHE", str(tmp_path / "cache"))
    row = {"name": "help", "repository": "someone/demo", "commit": commit, "path": "nb.ipynb"}
    folder, mine, script = aw.rebuild(row)
    assert (mine, script) == ("original.ipynb", None)
    assert os.path.exists(os.path.join(folder, "original.ipynb"))


def test_a_cell_that_raises_by_design_runs_and_the_next_cells_see_its_names(aw, tmp_path):
    text = "\n".join([
        "```{code-cell}", ":tags: [raises-exception]", "", "def helper():", "    return 41",
        "raise TypeError('shown by the docs build')", "```", "",
        "```{code-cell}", "helper() + 1", "```", ""])
    script = aw.notebook_script("nb.md", text)
    shown = subprocess.run(["python3", "-c", script], capture_output=True, text=True)
    assert (shown.returncode, shown.stdout) == (0, "42\n")


@pytest.mark.parametrize("plain_prints, outcome", [
    ("jaxpr of\nthree lines\n7.25\n", "runs, as plain JAX 0.10"),
    ("jaxpr of\nthree lines\n7.5\n", "DIFFERENT from 0.4.30"),
])
def test_an_output_plain_jax_prints_whole_is_jax_s_even_in_another_line_count(
        aw, tmp_path, monkeypatch, plain_prints, outcome):
    # 0.4.30 printed the jaxpr on one line; JAX 0.10 on two: the line counts
    # differ, and only plain JAX 0.10 printing the very same output makes it JAX's
    printed = {"mine": "jaxpr of\nthree lines\n7.25\n", "classic": "jaxpr on one line\n7.25\n",
               "plain": plain_prints}

    def fake_run(command, folder, env):
        who = ("mine" if "pmapkit" in command else
               "classic" if command[0] == aw.CLASSIC else "plain")
        return 0, printed[who], ""

    monkeypatch.setattr(aw, "rebuild", lambda row: (str(tmp_path), "original.py", "original.py"))
    monkeypatch.setattr(aw.run, "_run", fake_run)
    row = {"name": "demo", "env": "", "ignore": "", "edit": ""}
    assert aw.measure(row, {})[0] == outcome
