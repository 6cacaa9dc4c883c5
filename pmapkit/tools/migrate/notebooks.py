"""Jupyter notebooks (``.ipynb``), migrated cell by cell.

The code cells are joined, in order, into one Python text (a marker comment
before each), so the rules read the notebook's imports wherever a cell makes
them, as the kernel did; the result is cut back at the markers. A code cell
whose text changed gets the new text and loses its outputs (they were the old
code's); every other cell, the markdown, the outputs of cells left as they
were and the metadata stay as they are. The notebook is written back in the
JSON layout it was read in (indentation, key order, escapes, final newline),
so a cell not rewritten keeps its bytes.

IPython's own lines are left as they are: a line magic or shell line
(``%timeit f(x)``, ``!pip install jax``, ``files = !ls``) stands in the
joined text as a comment (in a block: a ``pass``) while the rules run, and
a cell magic (a cell opening with ``%%``) keeps its whole cell.

``--check`` runs a notebook as a script of its code cells in order
(``script``); a notebook with magics or shell lines is refused there, with
the cell that has one.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re

SUFFIX = ".ipynb"

# A line IPython runs itself: a line magic, a shell escape, an assignment from
# one (``x = !ls``, ``t = %timeit -o f()``), a help request (``f?``).
_IPYTHON_LINE = re.compile(r"^\s*(?:[%!]|\w+\s*=\s*[%!]|[\w.]+\?\??\s*$)")
_MARKER = "# pmapkit-migrate: notebook cell {}"
_MARKER_LINE = re.compile(r"^# pmapkit-migrate: notebook cell (\d+)$")
# An IPython line while the rules run: a comment at the top level (the
# imports above and below it stay the file's imports), a ``pass`` in a block.
_HOLDER = "# pmapkit-migrate: IPython line {}"
_HELD_IN_BLOCK = "pass  "
_HOLDER_LINE = re.compile(r"^(\s*)(?:pass  )?# pmapkit-migrate: IPython line (\d+)$")


class NotANotebook(Exception):
    """A ``.ipynb`` file that is not a notebook migrate can read, or cannot run as a script."""


def is_notebook(path):
    return path.endswith(SUFFIX)


@functools.total_ordering
@dataclasses.dataclass(frozen=True)
class CellLine:
    """A place in a notebook: its code cell (counted from 1 among all cells) and line."""
    cell: int
    line: int

    def __format__(self, spec):
        return format(f"cell {self.cell}:{self.line}", spec)

    def __lt__(self, other):
        return (self.cell, self.line) < (other.cell, other.line)


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _read(text, path):
    try:
        notebook = json.loads(text)
    except ValueError as exc:
        raise NotANotebook(f"{path} is not a notebook: not JSON ({exc})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise NotANotebook(f"{path} is not a notebook: no list of cells")
    return notebook


def _layout(text, notebook):
    """The ``json.dumps`` options that write ``notebook`` back as ``text``, or None."""
    for indent in (1, 2, 4, None, 3):
        for sort_keys in (True, False):
            for ensure_ascii in (False, True):
                dumped = json.dumps(notebook, indent=indent, sort_keys=sort_keys,
                                    ensure_ascii=ensure_ascii)
                if text in (dumped, dumped + "\n"):
                    return dict(indent=indent, sort_keys=sort_keys,
                                ensure_ascii=ensure_ascii), text.endswith("\n")
    return None


def _code_cells(notebook):
    """[(index among all cells, cell)] of the code cells."""
    return [(k, c) for k, c in enumerate(notebook["cells"])
            if isinstance(c, dict) and c.get("cell_type") == "code"]


def ipython_lines(notebook):
    """[(cell number from 1, the line)] of each magic or shell line of the code cells."""
    found = []
    for k, cell in _code_cells(notebook):
        for line in _source(cell).splitlines():
            if _IPYTHON_LINE.match(line):
                found.append((k + 1, line.strip()))
    return found


def _hold(source, held):
    """``source`` with IPython's lines replaced by ``pass`` lines (kept in ``held``)."""
    if source.lstrip().startswith("%%"):
        held.append(source)
        return _HOLDER.format(len(held) - 1) + "\n"
    lines = []
    for line in source.splitlines(keepends=True):
        if _IPYTHON_LINE.match(line):
            held.append(line.rstrip("\r\n"))
            indent = line[:len(line) - len(line.lstrip())]
            end = line[len(line.rstrip("\r\n")):]
            lines.append(indent + (_HELD_IN_BLOCK if indent else "")
                         + _HOLDER.format(len(held) - 1) + (end or "\n"))
        else:
            lines.append(line)
    return "".join(lines)


def _restore(text, held):
    def back(match):
        kept = held[int(match.group(2))]
        return kept.rstrip("\n") if kept.lstrip().startswith("%%") else kept
    return "".join(_HOLDER_LINE.sub(back, line.rstrip("\r\n")) + line[len(line.rstrip("\r\n")):]
                   for line in text.splitlines(keepends=True))


def joined(notebook):
    """(the code cells joined into one Python text, [code cell index], [first line
    of each cell in it], [IPython lines held])."""
    parts, indexes, starts, held, line = [], [], [], [], 1
    for k, cell in _code_cells(notebook):
        code = _hold(_source(cell), held)
        if code and not code.endswith("\n"):
            code += "\n"
        parts.append(_MARKER.format(k) + "\n" + code)
        indexes.append(k)
        starts.append(line + 1)
        line += 1 + code.count("\n")
    return "".join(parts), indexes, starts, held


def _split(text, indexes):
    """{cell index: its text} cut from the migrated joined ``text`` at the markers;
    what comes before the first marker (an import migrate added) goes to the first cell."""
    pieces, current, head = {}, None, []
    for line in text.splitlines(keepends=True):
        match = _MARKER_LINE.match(line.rstrip("\r\n"))
        if match:
            current = int(match.group(1))
            pieces[current] = head if not pieces else []
            head = []
        elif current is None:
            head.append(line)
        else:
            pieces[current].append(line)
    if list(pieces) != indexes:
        raise NotANotebook("the migrated cells could not be cut apart again")
    return {k: "".join(v) for k, v in pieces.items()}


def _where(starts, indexes, line):
    for k in range(len(starts) - 1, -1, -1):
        if line >= starts[k]:
            return CellLine(indexes[k] + 1, line - starts[k] + 1)
    return CellLine(indexes[0] + 1, 1)


def migrate_notebook(text, path, migrate_module):
    """(new notebook text, report) of the notebook ``text``; ``migrate_module``
    migrates Python text."""
    notebook = _read(text, path)
    code, indexes, starts, held = joined(notebook)
    new_code, report = migrate_module(code, path)
    for entry in ("rewrites", "left", "kept"):
        setattr(report, entry, [dataclasses.replace(r, line=_where(starts, indexes, r.line))
                                for r in getattr(report, entry)])
    if new_code == code:
        return text, report
    old_cells = _split(code, indexes)
    layout = _layout(text, notebook)
    for k, new in _split(new_code, indexes).items():
        if new == old_cells[k]:
            continue
        cell = notebook["cells"][k]
        new = _restore(new, held)
        original = _source(cell)
        if not original.endswith("\n") and new.endswith("\n"):
            new = new[:-1]
        cell["source"] = (new.splitlines(keepends=True) if isinstance(cell.get("source"), list)
                          else new)
        if "outputs" in cell:
            cell["outputs"] = []
        if "execution_count" in cell:
            cell["execution_count"] = None
    options, newline = layout or (dict(indent=1, sort_keys=True, ensure_ascii=False), True)
    return json.dumps(notebook, **options) + ("\n" if newline else ""), report


def script(text, path):
    """The notebook ``text``'s code cells in order, as one Python script (for
    ``--check``); NotANotebook where a cell has a magic or shell line."""
    notebook = _read(text, path)
    found = ipython_lines(notebook)
    if found:
        cell, line = found[0]
        raise NotANotebook(
            f"--check runs a notebook's code cells as a Python script, and {path} has "
            f"{len(found)} IPython line(s) that Python cannot run (cell {cell}: {line!r}); "
            "nothing was run: check a copy without them")
    return "".join(_source(c).rstrip("\n") + "\n\n" for _k, c in _code_cells(notebook))
