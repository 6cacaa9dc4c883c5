"""``pmapkit run NOTEBOOK.ipynb``: a notebook's code cells run in order in
one ``__main__``, as ``ipython NOTEBOOK.ipynb`` runs them.

Cells of plain Python run without IPython. A notebook with IPython syntax (a
``%magic``, ``%%cell magic``, ``!shell`` line or ``x?`` help) runs through
IPython's own shell, which must then be installed; without it the run stops
before any cell, naming the first such line and the install. Markdown and
raw cells are skipped. A cell that raises ends the run with status 1 after
its traceback (the cell's own lines shown), as a script's error would.
"""
import json
import linecache
import os
import re
import sys

__all__ = ["code_cells", "needs_ipython", "run_notebook", "NotANotebook"]


class NotANotebook(ValueError):
    """The file is not a Jupyter notebook (nbformat 3 or 4 JSON)."""


def code_cells(path):
    """The code cells of the notebook at ``path``, in order, as source strings
    (nbformat 4 ``cells``; nbformat 3 ``worksheets``)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        notebook = json.loads(raw)
    except ValueError as exc:
        raise NotANotebook(f"{path}: not a Jupyter notebook (not JSON: {exc})") from None
    if not isinstance(notebook, dict):
        raise NotANotebook(f"{path}: not a Jupyter notebook (no cells)")
    if "cells" in notebook:
        cells, key = notebook["cells"], "source"
    elif notebook.get("worksheets"):
        cells, key = notebook["worksheets"][0].get("cells", []), "input"
    else:
        raise NotANotebook(f"{path}: not a Jupyter notebook (no cells)")
    sources = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get(key, "")
        sources.append("".join(source) if isinstance(source, list) else str(source))
    return sources


# A line IPython reads as its own syntax, not Python's: line and cell magics,
# shell escapes (also assigned: ``files = !ls``), help (``x?``, ``?x``).
_IPYTHON_LINE = re.compile(
    r"^\s*(%|!|\?)|^\s*[\w.]+\s*=\s*[!%]|^\s*[\w.]+\?{1,2}\s*$")
# A call of ``get_ipython()``, a builtin only IPython's shell provides.
_GET_IPYTHON = re.compile(r"\bget_ipython\s*\(")


def needs_ipython(source):
    """The first line of ``source`` that only IPython runs, or None."""
    for line in source.splitlines():
        if _IPYTHON_LINE.match(line) or _GET_IPYTHON.search(line):
            return line.strip()
    return None


def run_notebook(path, args=()):
    """Runs the notebook at ``path`` as ``__main__`` (``sys.argv = [path,
    *args]``, ``__file__`` the absolute path, its folder first on sys.path)."""
    from pmapkit.tools import run as run_as_main
    try:
        cells = code_cells(path)
    except (NotANotebook, OSError) as exc:
        print(f"{os.path.basename(sys.argv[0]) or 'pmapkit'} run: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    ipython_line = next(((i, line) for i, line in
                         ((i, needs_ipython(c)) for i, c in enumerate(cells, 1)) if line), None)
    sys.argv[:] = [path, *args]
    where = os.path.abspath(path)
    run_as_main.set_first_path_entry(os.path.dirname(where))
    if ipython_line is not None:
        try:
            import IPython  # noqa: F401
        except ImportError:
            number, line = ipython_line
            print(f"pmapkit run: {path}: code cell {number} uses IPython syntax "
                  f"({line[:60]!r}); running it needs IPython: pip install ipython",
                  file=sys.stderr)
            raise SystemExit(1) from None
        _run_in_ipython(cells, where)
        return
    names = dict(__file__=where, __cached__=None, __spec__=None, __package__=None,
                 __loader__=None)
    run_as_main.run_in_main(lambda main: _exec_cells(cells, where, main), names)


def _cell_name(where, number):
    return f"{where} (code cell {number})"


def _exec_cells(cells, where, main):
    for number, source in enumerate(cells, 1):
        filename = _cell_name(where, number)
        # Tracebacks show the cell's lines (linecache has no file to read).
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)


def _run_in_ipython(cells, where):
    """Each cell through IPython's shell, in order; the first that fails
    ends the run (IPython has printed its traceback)."""
    # The shell ``ipython notebook.ipynb`` runs cells in: GUI event loops
    # (``%matplotlib inline``) need its subclass, not the base shell.
    from IPython.terminal.interactiveshell import TerminalInteractiveShell
    # Plain tracebacks where nobody reads colours (a pipe, a log).
    colors = "Neutral" if sys.stdout.isatty() else "NoColor"
    shell = TerminalInteractiveShell.instance(colors=colors)
    shell.user_ns.update(__file__=where, __name__="__main__")
    for source in cells:
        result = shell.run_cell(source, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        if isinstance(error, SystemExit):
            raise error
        if error is not None:
            raise SystemExit(1)
