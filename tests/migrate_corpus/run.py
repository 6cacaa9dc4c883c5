r"""The migrate corpus: public classic programs (``programs.tsv``) rebuilt from
their repositories' git mirrors into /work/cache/migrate-corpus (never into
the checkout), each run as users would: the original under ``pmapkit run``,
``pmapkit migrate`` on it, the migrated file on plain JAX (pmapkit not
imported, ``-W error::DeprecationWarning``), stdout compared exactly.

    python -P tests/migrate_corpus/run.py [--cache DIR] [NAME ...]

``--cache DIR`` rebuilds into DIR instead (two sessions running the corpus at
once each keep their own folders).

A row may name, in its optional column ``ignore``, a regular expression
for stdout lines that legitimately differ between the two runs (a mesh's
repr, which is pmapkit's under ``pmapkit run`` and JAX 0.10's after migrate;
a timing); lines it matches (``re.search``) are dropped from both outputs
before comparing, and the outcome's detail says how many. No row ignores
anything unless it says so.

Two more optional columns, both empty unless a row needs them. ``edit``:
source-line edits made when the program is rebuilt, ``REGEX => REPLACEMENT``
pairs separated by `` ;; `` (a notebook's TPU-setup cell cannot run on CPU:
``import jax\.tools\.colab_tpu => import jax`` keeps the import of jax it
also made, ``^.*setup_tpu\(\)$ =>`` drops the call); each pair is ``re.sub`` on
every line, a line an edit leaves blank is dropped, and the outcome's detail
says how many lines were edited. ``run_options``: options given to
``pmapkit run`` for the original (``--route-pmap`` where the
program nests a pmap inside another pmap's body, which JAX 0.10's own
``jax.pmap`` cannot do); the migrated file always runs on plain JAX.

The column ``env`` holds ``KEY=VALUE`` pairs for the program's environment
(``DEVICES=N``: N CPU devices).

The column ``out``, empty but for a program whose output cannot be compared
at all (checked by hand, and said there: a program printing unseeded random
draws never prints the same twice), marks it out without running it.

Before comparing, an object's address in a default repr (``<function f at
0x7f...>``), which differs in every process, is masked in both outputs, and so
is a location in the program's own file that the program prints (JAX's
"while tracing the function f at .../original.py:117"), whose name and line
differ by design (the migrated file is another file, helpers written at its
top); the outcome's detail says how many of each.

Outcomes: ``equal`` (both exit 0, the same stdout), ``DIFFERENT`` (both exit 0,
stdout differs: a wrong value), ``migrated fails`` (with "0 left" said or not),
``out`` (the original itself does not run here: a dataset, a cluster, ...).
Needs the mirrors of the repositories (``/work/.mirror/OWNER+NAME/repo``,
brought by the session tool ``fetch github:OWNER/NAME``).

A notebook (a MyST ``.md`` with ``{code-cell}`` blocks, or an ``.ipynb``) is
rebuilt into ``original.py`` the way Jupyter runs it: its code cells in order,
the last bare expression of a cell shown with ``print(repr(...))`` as
IPython's display hook would (unless the line ends in ``;``), cells tagged
``raises-exception`` left out (the docs build expects them to fail), and
IPython magics (``%``, ``!``) dropped."""
import ast
import csv
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# MIGRATE_CORPUS_CACHE: another folder for the rebuilt programs (two runs at once).
CACHE = os.environ.get("MIGRATE_CORPUS_CACHE", "/work/cache/migrate-corpus")
MIRRORS = "/work/.mirror"
# CORPUS_TIMEOUT_S: a run's limit in seconds (environment, or a row's env column).
TIMEOUT_S = int(os.environ.get("CORPUS_TIMEOUT_S", "180"))


def programs():
    with open(os.path.join(HERE, "programs.tsv")) as f:
        rows = [line for line in f if not line.startswith("#")]
    return list(csv.DictReader(rows, delimiter="\t"))


def _env(spec):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_PLATFORMS"] = "cpu"
    for item in filter(None, spec.split(";")):
        key, _, value = item.partition("=")
        if key == "DEVICES":
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={value}"
        else:
            env[key] = value
    return env


def _run(command, folder, env):
    # a row's env column may give it a longer limit (CORPUS_TIMEOUT_S=900)
    limit = int(env.get("CORPUS_TIMEOUT_S", TIMEOUT_S))
    try:
        proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                              timeout=limit, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {limit} s"
    return proc.returncode, proc.stdout, proc.stderr


# CPython's default repr of an object (a function in a printed pytree) names
# its address, which differs from one process to the next: masked in both
# outputs, the rest of the line still compared.
_ADDRESS = re.compile(r" at 0x[0-9a-f]+>")


def _program_location(folder):
    """A place in the program's own file (``FOLDER/original.py:117``)."""
    return re.compile(re.escape(folder) + r"/(?:original|migrated)\.py:\d+")


def _last_error(stderr):
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(
        ("W0000", "I0000", "WARNING: All log messages", "For simplicity, JAX has removed",
         "--------------------"))]
    return lines[-1][:160] if lines else ""


_DISPLAY = "def _nb_display(value):\n    if value is not None:\n        print(repr(value))\n"


def _md_cells(text):
    """(options, code) of each MyST ``{code-cell}`` block."""
    cells, lines = [], iter(text.splitlines())
    for line in lines:
        if not line.startswith("```{code-cell}"):
            continue
        body = []
        for inner in lines:
            if inner.startswith("```"):
                break
            body.append(inner)
        if body[:1] == ["---"] and "---" in body[1:]:       # a YAML options block
            end = body.index("---", 1)
            options, body = body[1:end], body[end + 1:]
        else:
            options = [b for b in body if b.startswith(":")]
            body = [b for b in body if not b.startswith(":")]
        cells.append((" ".join(options), "\n".join(body)))
    return cells


def _ipynb_cells(text):
    cells = []
    for cell in json.loads(text)["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            source = "".join(source) if isinstance(source, list) else source
            cells.append((" ".join(cell.get("metadata", {}).get("tags", [])), source))
    return cells


def _displayed(code):
    """The cell's code with its last bare expression printed as IPython shows it."""
    code = "\n".join(line for line in code.splitlines()
                     if not line.lstrip().startswith(("%", "!")))
    tree = ast.parse(code)
    if not tree.body or not isinstance(tree.body[-1], ast.Expr) or code.rstrip().endswith(";"):
        return code
    last = tree.body[-1]
    lines = code.splitlines()
    expr = ast.get_source_segment(code, last.value)
    # parenthesised: a bare tuple (``a.shape, b.shape``) is one value, as IPython shows it
    return "\n".join(lines[:last.lineno - 1] + [f"_nb_display(({expr}))"])


def edit_lines(code, edits):
    """(code with the row's ``edit`` pairs applied to each line, how many lines changed)."""
    if not edits:
        return code, 0
    pairs = [item.split("=>", 1) for item in edits.split(";;")]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"edit: each item must be 'REGEX => REPLACEMENT', got {edits!r}")
    kept, changed = [], 0
    for line in code.splitlines():
        new = line
        for pattern, replacement in pairs:
            new = re.sub(pattern.strip(), replacement.strip(), new)
        changed += new != line
        if new.strip() or not line.strip():
            kept.append(new)
    return "\n".join(kept), changed


def notebook_script(path, text, edits=""):
    """A notebook's code cells as one script (see the module docstring)."""
    cells = _ipynb_cells(text) if path.endswith(".ipynb") else _md_cells(text)
    kept = []
    for options, code in cells:
        if "raises-exception" not in options:
            code, _ = edit_lines(code, edits)
            if code.strip():
                kept.append(_displayed(code))
    return _DISPLAY + "\n\n".join(kept) + "\n"


def rebuild(row):
    """The program's folder in the cache, its original.py written from the mirror."""
    mirror = os.path.join(MIRRORS, row["repository"].replace("/", "+"), "repo")
    if not os.path.isdir(mirror):
        raise FileNotFoundError(f"no mirror of {row['repository']}: fetch github:{row['repository']}")
    source = subprocess.run(["git", "-C", mirror, "show", f"{row['commit']}:{row['path']}"],
                            capture_output=True, check=True).stdout
    edits = row.get("edit") or ""
    edited = edit_lines(_notebook_source(row["path"], source.decode()), edits)[1] if edits else 0
    if row["path"].endswith((".md", ".ipynb")):
        source = notebook_script(row["path"], source.decode(), edits).encode()
    elif edited:
        source = edit_lines(source.decode(), edits)[0].encode() + b"\n"
    folder = os.path.join(CACHE, row["name"])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "original.py"), "wb") as f:
        f.write(source)
    return folder, edited


def _notebook_source(path, text):
    """The code the edits are counted on: a notebook's code cells, or the file."""
    if path.endswith((".md", ".ipynb")):
        cells = _ipynb_cells(text) if path.endswith(".ipynb") else _md_cells(text)
        return "\n".join(code for options, code in cells if "raises-exception" not in options)
    return text


def measure(row):
    """(outcome, migrate's counts, detail) for one program."""
    if row.get("out"):
        return "out", "", row["out"]
    folder, edited = rebuild(row)
    env = _env(row["env"])
    options = (row.get("run_options") or "").split()
    rc, out, err = _run([sys.executable, "-m", "pmapkit", "run", *options, "original.py"],
                        folder, env)
    if rc != 0:
        return "out", "", f"the original fails under pmapkit run: {_last_error(err)}"
    mrc, mout, merr = _run([sys.executable, "-m", "pmapkit", "migrate", "original.py", "-o",
                            "migrated.py"], folder, env)
    counts = re.search(r"(\d+) rewritten, (\d+) left, (\d+) pmap kept", mout)
    counts = counts.group(0) if counts else f"migrate exit {mrc}: {_last_error(merr)}"
    if mrc not in (0, 1) or not os.path.exists(os.path.join(folder, "migrated.py")):
        return "migrate fails", counts, _last_error(merr)
    nrc, nout, nerr = _run([sys.executable, "-P", "-W", "error::DeprecationWarning",
                            "migrated.py"], folder, env)
    if nrc != 0:
        zero = " (said 0 left)" if " 0 left," in counts else ""
        return "migrated fails" + zero, counts, _last_error(nerr)
    masked = len(_ADDRESS.findall(out))
    out, nout = (_ADDRESS.sub(" at 0x...>", text) for text in (out, nout))
    located = len(_program_location(folder).findall(out))
    out, nout = (_program_location(folder).sub("<the program>:<line>", text)
                 for text in (out, nout))
    ignored = 0
    if row.get("ignore"):
        kept = [[line for line in text.splitlines(keepends=True)
                 if not re.search(row["ignore"], line)] for text in (out, nout)]
        ignored = len(out.splitlines()) - len(kept[0])
        out, nout = ("".join(k) for k in kept)
    if nout != out:
        first = next((k for k, (a, b) in enumerate(zip(out.splitlines(), nout.splitlines()))
                      if a != b), None)
        return "DIFFERENT", counts, f"stdout line {first}"
    note = f" ({ignored} ignored: {row['ignore']})" if row.get("ignore") else ""
    note += f" ({masked} object addresses masked)" if masked else ""
    note += f" ({located} program locations masked)" if located else ""
    note += f" ({edited} source lines edited)" if edited else ""
    note += f" (original run with {' '.join(options)})" if options else ""
    return "equal", counts, f"{len(out.splitlines())} stdout lines{note}"


def main(names):
    global CACHE
    if names[:1] == ["--cache"]:
        if len(names) < 2:
            raise SystemExit("--cache needs a folder")
        CACHE, names = os.path.abspath(names[1]), names[2:]
    rows = [r for r in programs() if not names or r["name"] in names]
    results = []
    for row in rows:
        try:
            outcome, counts, detail = measure(row)
        except Exception as exc:      # a missing mirror: say so, go on
            outcome, counts, detail = "not rebuilt", "", str(exc)
        results.append((row["name"], outcome, counts, detail))
        print(f"{row['name']:<28} {outcome:<28} {counts:<40} {detail}", flush=True)
    ran = [r for r in results if r[1] not in ("out", "not rebuilt")]
    equal = sum(r[1] == "equal" for r in ran)
    wrong = sum(r[1] == "DIFFERENT" for r in ran)
    false_zero = sum("said 0 left" in r[1] for r in ran)
    print(f"\n{len(results)} programs, {len(ran)} run here: {equal} equal, {wrong} DIFFERENT, "
          f"{false_zero} failing after '0 left'")
    return 1 if wrong or false_zero else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
