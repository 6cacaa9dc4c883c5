r"""Each program of the corpus (``programs.tsv``) run as written under
``pmapkit run``, and, where it runs there, on classic JAX (0.4.30) too, the two
stdouts compared.

    python -P tests/migrate_corpus/run_as_written.py [--cache DIR] [--classic PYTHON] [NAME ...]

The program is rebuilt from its repository's mirror as ``run.py`` rebuilds it
(its ``edit`` lines, its ``run_options``), with one difference: an ``.ipynb``
is kept a notebook and run as users run one, ``pmapkit run original.ipynb``
(its code cells in order in one ``__main__``, as ``ipython nb.ipynb`` runs
them); where it runs, the script ``run.py`` makes of it (each cell's last bare
expression shown, magics left out) is run under ``pmapkit run`` and on
0.4.30 and the two compared. A MyST ``.md`` notebook is that script. Unlike
``run.py``'s rebuild, a cell tagged ``raises-exception`` runs (inside a
``try``, as the docs build runs it and goes on), so what it defined before
its error is there for the next cells; a cell tagged ``skip-execution`` is
left out, as the docs build leaves it.

``--classic PYTHON`` (default ``$CORPUS_CLASSIC_PYTHON`` or
``/work/venv-corpus-classic/bin/python``): an interpreter with jax/jaxlib
0.4.30, the last release before the classic layer was removed. A program of
2019–2020 whose names JAX 0.4.30 had already dropped (``jax.ops.index_update``,
``jax.experimental.optimizers``) fails there: it is "not checkable" on
0.4.30, and said so with the error.

``as_written.tsv`` names the programs that do not run here and why, each
with a class (the classes of docs/migrate.md's "Run as written" table):
``data`` (a data set, a download, a cluster, a TPU or a GPU), ``library`` (a
third-party library whose releases cannot run on JAX 0.10, or on this
Python), ``time`` (past the limit here), ``no equivalent`` (a classic API
pmapkit refuses by design, with its reason), ``classic fails`` (the program
failed on the classic JAX of its time too), ``unseeded`` (it runs, but
prints values no two runs share: not compared), and ``pmapkit`` (a classic
behaviour pmapkit does not serve yet, reported with a reproducer: still a
failure, and the exit status is 1). A program that fails here and
is not named there is ``FAILS (unclassified)``: a pmapkit-caused failure
until shown otherwise, and the exit status is 1. So is a program that runs
under both and prints something else (``DIFFERENT from 0.4.30``) unless each line that
differs is what plain JAX 0.10 (run on the same file without pmapkit, with
``JAX_THREEFRY_PARTITIONABLE=0``: the classic jax.random streams; where it
stops on a classic behaviour ``pmapkit run`` serves, such as ``jnp.vstack`` of
tuples, with those behaviours alone and no served names) prints
there (``runs, as plain JAX 0.10``: a float32 digit of JAX's and XLA's own,
not the classic layer's), and a named program that now runs (``runs (was: ...)``, the row to remove)."""
import csv
import importlib.util
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_runner():
    spec = importlib.util.spec_from_file_location("migrate_corpus_run",
                                                  os.path.join(HERE, "run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = _load_runner()
CLASSIC = os.environ.get("CORPUS_CLASSIC_PYTHON", "/work/venv-corpus-classic/bin/python")
CLASSES = ("data", "library", "time", "no equivalent", "classic fails", "unseeded", "pmapkit")


def known():
    """name -> (class, why) for the programs that do not run (or compare) here."""
    with open(os.path.join(HERE, "as_written.tsv")) as f:
        rows = [line for line in f if not line.startswith("#")]
    table = {}
    for row in csv.DictReader(rows, delimiter="\t"):
        if row["class"] not in CLASSES:
            raise ValueError(f"as_written.tsv: {row['name']}: class {row['class']!r} "
                             f"is not one of {CLASSES}")
        table[row["name"]] = (row["class"], row["why"])
    return table


# A notebook's package-install line (``!pip install -q jax==0.1.54``) would
# replace the JAX under test: dropped, as Jupyter's setup cells are run once
# per machine, not per run.
_INSTALL = re.compile(r"\s*[!%]\s*(pip3?|python3? -m pip|conda|apt(-get)?)\s+install\b")


def notebook_script(path, text, edits=""):
    """A notebook's code cells as one script, as Jupyter runs them: ``run.py``'s
    rebuild, but a cell tagged ``raises-exception`` is run, not left out (inside
    ``try``: the docs build expects its error and goes on, and what the cell
    defined before raising is there for the cells after it)."""
    cells = run._ipynb_cells(text) if path.endswith(".ipynb") else run._md_cells(text)
    kept = []
    for options, code in cells:
        code, _ = run.edit_lines(code, edits)
        if not code.strip() or "skip-execution" in options:     # the docs build skips it
            continue
        if "raises-exception" in options:
            code = "\n".join(line for line in code.splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            kept.append(f"try:\n    exec(compile({code!r}, '<cell>', 'exec'), globals())\n"
                        "except Exception:\n    pass")
        else:
            kept.append(run._displayed(code))
    return run._DISPLAY + "\n\n".join(kept) + "\n"


def _write_script(folder, script):
    # a cell's ``from __future__ import ...`` goes first, where Python wants it
    future = [line for line in script.splitlines() if line.startswith("from __future__ ")]
    rest = [line for line in script.splitlines() if not line.startswith("from __future__ ")]
    with open(os.path.join(folder, "original.py"), "w") as f:
        f.write("\n".join(future + rest) + "\n")


def _source(row):
    mirror = os.path.join(run.MIRRORS, row["repository"].replace("/", "+"), "repo")
    if not os.path.isdir(mirror):
        raise FileNotFoundError(f"no mirror of {row['repository']}: fetch github:{row['repository']}")
    return run.subprocess.run(["git", "-C", mirror, "show", f"{row['commit']}:{row['path']}"],
                              capture_output=True, check=True).stdout.decode()


def rebuild(row):
    """(folder, the file pmapkit runs, the script compared with 0.4.30 or None).

    An ``.ipynb`` is kept a notebook (``original.ipynb``, the row's edits made
    in its code cells); the script compared is ``run.py``'s rebuild of it
    (each cell's last bare expression shown), made only where every cell is
    plain Python."""
    if row["path"].endswith(".md"):
        folder = os.path.join(run.CACHE, row["name"])
        os.makedirs(folder, exist_ok=True)
        _write_script(folder, notebook_script(row["path"], _source(row), row.get("edit") or ""))
        return folder, "original.py", "original.py"
    if not row["path"].endswith(".ipynb"):
        folder, _ = run.rebuild(row)
        return folder, "original.py", "original.py"
    text = _source(row)
    folder = os.path.join(run.CACHE, row["name"])
    os.makedirs(folder, exist_ok=True)
    nb = json.loads(text)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            source = "".join(source) if isinstance(source, list) else source
            if row.get("edit"):
                source = run.edit_lines(source, row["edit"])[0]
            cell["source"] = "\n".join(line for line in source.splitlines()
                                       if not _INSTALL.match(line))
    with open(os.path.join(folder, "original.ipynb"), "w") as f:
        json.dump(nb, f)
    try:
        script = notebook_script(row["path"], text, row.get("edit") or "")
    except SyntaxError:        # IPython syntax (``f?``, ``x = !ls``): not compared
        return folder, "original.ipynb", None
    _write_script(folder, script)
    return folder, "original.ipynb", "original.py"


# A literal in a printed jaxpr: JAX 0.10 writes its type (``add 1.0:f32[] b``),
# JAX 0.4.30 did not (``add 1.0 b``); the type is dropped from both.
_JAXPR_LITERAL = re.compile(r"(?<=[\s(,])(-?\d[\d.e+-]*|True|False):[a-z]+\d*\[[\d,]*\]")


def _normalized(row, text):
    text = _JAXPR_LITERAL.sub(r"\1", run._ADDRESS.sub(" at 0x...>", text))
    if row.get("ignore"):
        text = "".join(line for line in text.splitlines(keepends=True)
                       if not re.search(row["ignore"], line))
    return text


def _compare(row, out, cout):
    ignored = sum(bool(re.search(row["ignore"], line)) for line in out.splitlines()
                  ) if row.get("ignore") else 0
    return _normalized(row, out) == _normalized(row, cout), ignored


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _error(err, out):
    """The failure's last line: stderr's, or (a notebook run through IPython's
    shell prints its traceback on stdout) stdout's, colours removed."""
    for text in (err, _ANSI.sub("", out)):
        lines = [line for line in text.splitlines() if line.strip()
                 and not line.startswith("pmapkit.legacy: served")]
        last = run._last_error("\n".join(lines))
        if last:
            return last
    return ""


#: Plain JAX 0.10 with pmapkit's classic behaviours only (the wrappers of
#: JAX's own functions ``pmapkit run`` installs: stacking inputs, unhashable
#: static arguments, make_mesh's axes, pure_callback under vmap), then the
#: script as ``__main__``.
_WITH_BEHAVIOURS = """\
import runpy, sys
from pmapkit.legacy import (classic_make_mesh, classic_pure_callback,
                            classic_stack_inputs, classic_static_args)
classic_stack_inputs.classic_sequence_elements()
classic_static_args.classic_unhashable_statics()
classic_make_mesh.classic_auto_axes()
classic_pure_callback.classic_vmap_default()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def measure(row, table):
    """(outcome, detail) of one program run as written."""
    folder, mine, script = rebuild(row)
    env = run._env(row["env"])
    options = (row.get("run_options") or "").split()
    rc, out, err = run._run([sys.executable, "-m", "pmapkit", "run", *options, mine], folder, env)
    cls, why = table.get(row["name"], (None, None))
    if rc != 0:
        error = _error(err, out) if rc is not None else err
        if cls is None or cls == "unseeded":
            return "FAILS (unclassified)", error
        return f"fails ({cls})", f"{why} [{error}]"
    lines = f"{len(out.splitlines())} stdout lines"
    if cls not in (None, "unseeded"):
        return f"runs (was: {cls})", why
    if cls == "unseeded":
        return "runs", f"{lines}; not compared: {why}"
    if script is None:
        return "runs", f"{lines}; not compared: a cell is IPython syntax"
    crc, cout, cerr = run._run([CLASSIC, "-P", script], folder, env)
    if crc != 0:
        error = run._last_error(cerr) if crc is not None else cerr
        return "runs", f"{lines}; 0.4.30 not checkable: {error}"
    if script != mine:      # a notebook: its cells' shown values compared
        rc, out, err = run._run([sys.executable, "-m", "pmapkit", "run", *options, script],
                                folder, env)
        if rc != 0:
            return "DIFFERENT from 0.4.30", f"{script} fails: {run._last_error(err)}"
        lines += f", {len(out.splitlines())} with cells' values shown"
    same, ignored = _compare(row, out, cout)
    if same:
        return "runs, equal to 0.4.30", lines + (f" ({ignored} ignored: {row['ignore']})"
                                                 if ignored else "")
    first = next((k for k, (a, b) in enumerate(zip(out.splitlines(), cout.splitlines()))
                  if a != b), min(len(out.splitlines()), len(cout.splitlines())))
    # JAX 0.10 itself (no pmapkit) printing what pmapkit run printed: the
    # difference is JAX's and XLA's (a float32 last digit), not the classic layer's
    # (with JAX's own switch to the classic jax.random streams, which pmapkit
    # run serves; line by line, in case a line is 0.4.30's all the same)
    plain_env = {**env, "JAX_THREEFRY_PARTITIONABLE": "0"}
    prc, pout, _ = run._run([sys.executable, "-P", script], folder, plain_env)
    if prc != 0:
        # plain JAX 0.10 stopped where it refuses a classic behaviour pmapkit
        # run serves (jnp.vstack of tuples): run it again with those
        # behaviours alone, no served names, so what it prints past that
        # point is still JAX's own
        prc, pout, _ = run._run([sys.executable, "-P", "-c", _WITH_BEHAVIOURS, script],
                                folder, plain_env)
    mine, classic, plain = (_normalized(row, t).splitlines() for t in (out, cout, pout))
    if prc == 0 and len(mine) == len(classic) == len(plain) and all(
            m in (c, p) for m, c, p in zip(mine, classic, plain)):
        differ = sum(m != c for m, c in zip(mine, classic))
        return "runs, as plain JAX 0.10", (f"{lines}; {differ} lines differ from 0.4.30 "
                                           "as plain JAX 0.10's do")
    return "DIFFERENT from 0.4.30", f"stdout line {first}"


def main(argv):
    global CLASSIC
    while argv[:1] in (["--cache"], ["--classic"]):
        if len(argv) < 2:
            raise SystemExit(f"{argv[0]} needs a value")
        if argv[0] == "--cache":
            run.CACHE = os.path.abspath(argv[1])
        else:
            CLASSIC = argv[1]
        argv = argv[2:]
    table = known()
    rows = [r for r in run.programs() if not argv or r["name"] in argv]
    unknown = set(table) - {r["name"] for r in run.programs()}
    if unknown:
        raise SystemExit(f"as_written.tsv names programs programs.tsv lacks: {sorted(unknown)}")
    results = []
    for row in rows:
        try:
            outcome, detail = measure(row, table)
        except Exception as exc:      # a missing mirror: say so, go on
            outcome, detail = "not rebuilt", str(exc)
        results.append((row, outcome))
        print(f"{row['name']:<30} {row['date'][:4]}  {outcome:<26} {detail}", flush=True)
    runs = [o for _, o in results if o.startswith("runs")]
    equal = sum(o == "runs, equal to 0.4.30" for o in runs)
    as_jax = sum(o == "runs, as plain JAX 0.10" for o in runs)
    bad = [o for _, o in results
           if o.startswith(("FAILS", "DIFFERENT", "runs (was", "fails (pmapkit)"))]
    by_class = {}
    for _, o in results:
        if o.startswith("fails ("):
            by_class[o[7:-1]] = by_class.get(o[7:-1], 0) + 1
    classes = ", ".join(f"{k} {v}" for k, v in sorted(by_class.items())) or "none"
    print(f"\n{len(results)} programs ({sum(r['date'] < '2021' for r, _ in results)} of 2019-2020, "
          f"{sum(r['path'].endswith('.ipynb') for r, _ in results)} .ipynb): {len(runs)} run as "
          f"written, {equal} equal to 0.4.30, {as_jax} as plain JAX 0.10; failures by class: "
          f"{classes}; "
          f"{len(bad)} pmapkit-caused, unclassified or DIFFERENT")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
