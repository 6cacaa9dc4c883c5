"""The house as ARCHITECTURE.md draws it is the house on disk, and no room
is a pile: the layout's folders are the package's, the rooms table lists
each core room's modules, and no source file is over 900 lines."""
import os
import re

import pytest

import _install
from test_import_graph import CORE_ROOMS

ARCHITECTURE = os.path.join(_install.REPO, "ARCHITECTURE.md")
PACKAGE = _install.CHECKOUT_PACKAGE
MAX_LINES = 900


@pytest.fixture(scope="module")
def drawing():
    if not os.path.exists(ARCHITECTURE):
        pytest.skip("no checkout beside the tests; set PMAPKIT_CHECKOUT")
    with open(ARCHITECTURE, encoding="utf-8") as f:
        return f.read()


def drawn_layout(text):
    """``(packages, rooms, modules)`` the layout block draws: the folders at
    the package's level, the folders inside ``core/`` in the order drawn,
    and the top-level modules (``x.py``, ``legacy/migrate.py``)."""
    block = text.split("## Layout", 1)[1].split("    pmapkit/\n", 1)[1]
    packages, rooms, modules = set(), [], set()
    for line in block.split("\n"):
        if not line.startswith("      "):
            break
        indent = len(line) - len(line.lstrip(" "))
        names = re.split(r" {2,}", line.strip())[0].split()
        for name in names:
            if name.endswith("/"):
                (rooms.append(name[:-1]) if indent == 8 else packages.add(name[:-1]))
            elif name.endswith(".py"):
                modules.add(name)
    return packages, rooms, modules


def drawn_rooms(text):
    """``{room: [modules]}`` from the rooms table, in the table's order: the
    ``x.py`` names in the row whose second column starts ``core/<room>/``."""
    rooms = {}
    for line in text.split("## Rooms, bottom to top", 1)[1].split("\n## ", 1)[0].split("\n"):
        cells = line.split(" | ")
        if len(cells) < 3:
            continue
        found = re.match(r"`core/(\w+)/`:", cells[1].strip())
        if found:
            rooms[found.group(1)] = re.findall(r"`(\w+\.py)`", cells[1])
    return rooms


def _packages(folder):
    return {d for d in os.listdir(folder)
            if os.path.isfile(os.path.join(folder, d, "__init__.py"))}


def _modules(folder):
    return {f for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"}


def test_the_layout_draws_the_folders(drawing):
    packages, rooms, modules = drawn_layout(drawing)
    assert packages == _packages(PACKAGE)
    assert set(rooms) == _packages(os.path.join(PACKAGE, "core"))
    top = {m for m in _modules(PACKAGE) if m != "__main__.py"}
    assert top <= modules, top - modules
    for module in modules:
        assert os.path.isfile(os.path.join(PACKAGE, module)), module


def test_the_rooms_table_lists_each_rooms_modules(drawing):
    _, layout_rooms, _ = drawn_layout(drawing)
    table = drawn_rooms(drawing)
    # Bottom to top, in the layout, the table and the import rule alike.
    assert layout_rooms == list(table) == list(CORE_ROOMS)
    for room, listed in table.items():
        assert sorted(listed) == sorted(_modules(os.path.join(PACKAGE, "core", room))), room


def test_the_readers_see_a_wrong_drawing(drawing):
    # A room on disk the drawing lacks, and a module the table lacks, are seen.
    _, rooms, _ = drawn_layout(drawing.replace("        aot/ ", "        gone/ "))
    assert "aot" not in rooms and "gone" in rooms
    table = drawn_rooms(drawing.replace("`calls.py`, ", ""))
    assert "calls.py" not in table["misses"]


def source_files(root):
    """Every Python source the checkout holds (the package, tests, bench,
    stress, suites, docs, the scripts), generated or not."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in (
            "__pycache__", "build", "site") and not d.endswith(".egg-info")]
        for f in files:
            if f.endswith((".py", ".pyx", ".pxd", ".pyi")):
                yield os.path.join(folder, f)


def long_files(root, limit=MAX_LINES):
    out = []
    for path in source_files(root):
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > limit:
            out.append(f"{os.path.relpath(path, root)}: {n} lines")
    return sorted(out)


def test_no_source_file_is_over_900_lines():
    root = _install.REPO if os.path.isdir(os.path.join(_install.REPO, "tests")) else PACKAGE
    assert long_files(root) == []


def test_the_line_count_sees_a_long_file(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_files(str(tmp_path)) == [f"long.py: {MAX_LINES + 1} lines"]
