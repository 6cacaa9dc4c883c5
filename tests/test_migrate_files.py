"""``pmapkit migrate`` never loses a file: atomic writes (a SIGKILL or SIGINT
at any moment of ``--in-place`` over many files leaves each whole, old or
new), ``-o`` refused where it would write over an input, output folders
never migrated again (and only folders migrate made are marked as its
output), line endings, BOM, coding line, permission bits and owner kept, a
symbolic link kept (its target written), a hard-linked file refused,
permission errors a usage error (exit 2), comments inside rewritten calls
kept.

Most run the command in this process (``command.main``); the interrupts
need a real process."""
import contextlib
import os
import pathlib
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from pmapkit.tools.migrate import command, files, migrate_source

from _migrate_helpers import env, migrate

CLASSIC = textwrap.dedent('''\
    import jax
    from jax.experimental import host_callback as hcb


    def step(x):
        y = jax.tree_map(lambda a: a * 2, x)   # double
        return hcb.id_tap(lambda v, t: None, y)


    print(step({"a": 1.0}))
    ''')
MIGRATED, _ = migrate_source(CLASSIC)


def _run(capsys, *args):
    """(status, stdout, stderr) of ``pmapkit migrate ARGS`` in this process."""
    status = command.main(list(map(str, args)))
    out, err = capsys.readouterr()
    return status, out, err


def _tree(root, names, text=CLASSIC):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# -- line endings, BOM, coding line, permissions ----------------------------------

def test_crlf_bom_and_coding_line_are_kept_exactly(tmp_path, capsys):
    crlf = CLASSIC.replace("\n", "\r\n").encode()
    bom = b"\xef\xbb\xbf" + CLASSIC.encode()
    latin = ("# -*- coding: latin-1 -*-\n" + CLASSIC + 'print("caf\xe9")\n').encode("latin-1")
    for name, data in (("crlf.py", crlf), ("bom.py", bom), ("latin.py", latin)):
        (tmp_path / name).write_bytes(data)
    status, out, err = _run(capsys, tmp_path / "crlf.py", tmp_path / "bom.py",
                            tmp_path / "latin.py", "-o", tmp_path / "out")
    assert status == 0, out + err
    got = {name: (tmp_path / "out" / name).read_bytes()
           for name in ("crlf.py", "bom.py", "latin.py")}
    # CRLF everywhere, the helper written in included: no lone LF.
    assert got["crlf.py"] == MIGRATED.replace("\n", "\r\n").encode()
    assert got["crlf.py"].count(b"\n") == got["crlf.py"].count(b"\r\n")
    assert got["bom.py"] == b"\xef\xbb\xbf" + MIGRATED.encode()
    text = got["latin.py"].decode("latin-1")
    assert text.startswith("# -*- coding: latin-1 -*-\n")
    assert b'print("caf\xe9")' in got["latin.py"] and "jax.tree.map" in text
    for name in got:    # and each runs as Python reads it
        compile(got[name], name, "exec")


def test_in_place_keeps_permission_bits_and_leaves_no_temporary_file(tmp_path, capsys):
    script = tmp_path / "run.py"
    script.write_text(CLASSIC)
    os.chmod(script, 0o754)
    status, out, err = _run(capsys, script, "--in-place")
    assert status == 0, out + err
    assert script.read_text() == MIGRATED
    assert stat.S_IMODE(os.stat(script).st_mode) == 0o754
    assert sorted(os.listdir(tmp_path)) == ["run.py"]


# -- -o that would write over an input --------------------------------------------

@pytest.mark.parametrize("where, message", [
    ("file", "is the input"),
    ("dot", "is the folder holding the input"),
    ("folder", "is the folder holding the input"),
    ("tree", "is the input"),
    ("link", "is the folder holding the input"),
])
def test_an_output_over_an_input_is_refused_and_the_input_unchanged(tmp_path, capsys,
                                                                    monkeypatch, where,
                                                                    message):
    _tree(tmp_path, ["src/train.py", "src/sub/model.py"])
    os.symlink(tmp_path / "src", tmp_path / "link")
    monkeypatch.chdir(tmp_path / "src")
    args = {"file": ["train.py", "-o", "train.py"],
            "dot": ["train.py", "-o", "."],
            "folder": [tmp_path / "src" / "train.py", "-o", tmp_path / "src"],
            "tree": [tmp_path / "src", "-o", tmp_path / "src"],
            "link": ["train.py", "-o", tmp_path / "link"]}[where]
    status, out, err = _run(capsys, *args)
    assert status == 2, out + err
    assert message in err and "use --in-place to overwrite the inputs" in err
    assert "nothing written" in err
    for name in ("train.py", "sub/model.py"):
        assert (tmp_path / "src" / name).read_text() == CLASSIC
    assert sorted(os.listdir(tmp_path / "src")) == ["sub", "train.py"]


def test_one_output_file_for_several_inputs_is_refused(tmp_path, capsys):
    _tree(tmp_path, ["a.py", "b.py"])
    status, out, err = _run(capsys, tmp_path / "a.py", tmp_path / "b.py",
                            "-o", tmp_path / "both.py")
    assert status == 2, out + err
    assert "-o " in err and "names one file, but 2 input files were found" in err
    assert not (tmp_path / "both.py").exists()


def test_output_folders_inside_the_input_tree_are_never_migrated(tmp_path, capsys):
    _tree(tmp_path, ["src/a.py", "src/sub/b.py"])
    status, out, err = _run(capsys, tmp_path / "src", "-o", tmp_path / "src" / "modern")
    assert status == 0, out + err
    assert "2 file(s):" in out
    assert (tmp_path / "src/modern/a.py").read_text() == MIGRATED
    assert os.path.isfile(tmp_path / "src/modern" / files.MARKER)
    # A later run to another folder skips the earlier output, and its own.
    status, out, err = _run(capsys, tmp_path / "src", "-o", tmp_path / "src" / "again")
    assert status == 0, out + err
    assert "2 file(s):" in out
    assert f"skipped {tmp_path / 'src' / 'modern'}: an output folder of pmapkit migrate" in out
    assert sorted(os.listdir(tmp_path / "src/again")) == [files.MARKER, "a.py", "sub"]
    assert not (tmp_path / "src/again/modern").exists()


# -- comments inside rewritten calls -------------------------------------------------

def test_comments_inside_rewritten_calls_are_kept():
    new, report = migrate_source(textwrap.dedent('''\
        import jax
        from jax.experimental import host_callback as hcb


        def f(x):
            y = hcb.call(fn,  # the host function
                         x,  # its argument
                         result_shape=x)
            z = jax.ops.index_update(y,  # the array
                                     0, 1.0)
            return jax.tree_map(g,  # kept in place
                                z)
        '''))
    assert len(report.rewrites) == 3
    lines = [line.strip() for line in new.splitlines()]
    for comment in ("# the host function", "# its argument", "# the array",
                    "# kept in place"):
        assert sum(comment in line for line in lines) == 1, (comment, new)
    # what a rewrite cannot keep in the call stands above its statement
    at = lines.index("y = _host_call(fn, x, x)")
    assert lines[at - 2:at] == ["# the host function", "# its argument"]
    assert "return jax.tree.map(g,  # kept in place" in lines


# -- interrupts -----------------------------------------------------------------------

# Small files: the interrupts are about writing, not rewriting.
TEMPLATE = 'import jax\n\nNAME = "FILE"\nprint(jax.tree_map(len, [NAME]))\n'
NEW_TEMPLATE, _ = migrate_source(TEMPLATE)
assert NEW_TEMPLATE != TEMPLATE and NEW_TEMPLATE.count('"FILE"') == 1


def _many(root, n=16):
    paths = []
    for k in range(n):
        path = root / f"pkg{k % 4}" / f"m{k:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TEMPLATE.replace('"FILE"', f'"{path.stem}"'))
        paths.append(path)
    return paths


def _whole(paths):
    """{"old": n, "new": n} or AssertionError naming a file neither old nor new."""
    seen = {"old": 0, "new": 0}
    for path in paths:
        text = path.read_text()
        if text == TEMPLATE.replace('"FILE"', f'"{path.stem}"'):
            seen["old"] += 1
        elif text == NEW_TEMPLATE.replace('"FILE"', f'"{path.stem}"'):
            seen["new"] += 1
        else:
            raise AssertionError(f"{path} is neither old nor new: {len(text)} chars")
    return seen


def _interrupt(root, paths, sig, delay):
    """Starts ``migrate --in-place`` over ``root``; once the first file changed
    (the writes began), waits ``delay`` s and sends ``sig``."""
    first = paths[0]    # written first: the walk is sorted
    before = first.read_bytes()
    proc = subprocess.Popen([sys.executable, "-m", "pmapkit", "migrate", str(root),
                             "--in-place"], env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and first.read_bytes() == before:
        assert time.monotonic() < deadline, "migrate never wrote"
        time.sleep(0.001)
    time.sleep(delay)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=300)
    return proc.returncode, err


def test_an_interrupt_during_in_place_leaves_every_file_old_or_new(tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    outcomes = []
    for round_, sig in enumerate((signal.SIGKILL, signal.SIGKILL, signal.SIGINT)):
        root = tmp_path / f"round{round_}"
        paths = _many(root)
        delay = 0.0 if round_ == 0 else rng.uniform(0.0, 0.02)
        status, err = _interrupt(root, paths, sig, delay)
        seen = _whole(paths)
        outcomes.append((sig.name, round(delay, 4), status, seen))
        strays = [f for _, _, fs in os.walk(root) for f in fs if not f.endswith(".py")]
        # a SIGKILL may leave a temporary file (never a .py file); SIGINT none:
        # it waits for the file being written
        assert all(f.startswith(files.TEMP_PREFIX) for f in strays), strays
        if sig == signal.SIGINT:
            assert strays == [], (seed, outcomes, err[-2000:])
    # The interrupts landed while files were being written (some old, some new).
    assert any(s["old"] and s["new"] for *_, s in outcomes), (seed, outcomes)
    # A second run finishes what the last interrupt cut.
    proc = migrate(str(root), "--in-place")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _whole(paths) == {"old": 0, "new": len(paths)}


# -- links, owners, output markers, permissions ----------------------------------------

def test_in_place_on_a_symlink_writes_its_target_and_keeps_the_link(tmp_path, capsys):
    _tree(tmp_path, ["real/train.py", "real/sub/model.py"])
    (tmp_path / "src").mkdir()
    os.symlink(os.path.join("..", "real", "train.py"), tmp_path / "src" / "train.py")
    os.symlink(tmp_path / "real" / "sub", tmp_path / "src" / "sub")
    status, out, err = _run(capsys, tmp_path / "src" / "train.py",
                            tmp_path / "src" / "sub" / "model.py", "--in-place")
    assert status == 0, out + err
    assert os.readlink(tmp_path / "src" / "train.py") == os.path.join("..", "real", "train.py")
    assert os.path.islink(tmp_path / "src" / "sub")
    for name in ("train.py", "sub/model.py"):
        assert (tmp_path / "real" / name).read_text() == MIGRATED
    assert sorted(os.listdir(tmp_path / "src")) == ["sub", "train.py"]
    assert sorted(os.listdir(tmp_path / "real")) == ["sub", "train.py"]


def test_a_hard_linked_file_is_refused_and_left_untouched(tmp_path, capsys):
    _tree(tmp_path, ["a.py", "b.py"])
    os.link(tmp_path / "a.py", tmp_path / "also_a.py")
    status, out, err = _run(capsys, tmp_path, "--in-place")
    assert status == 2, out + err
    assert f"refusing to write {str(tmp_path / 'a.py')!r}: it has 2 hard links" in err
    assert "nothing written" in err and "Traceback" not in err
    for name in ("a.py", "also_a.py", "b.py"):      # b.py too: all or nothing
        assert (tmp_path / name).read_text() == CLASSIC
    assert os.stat(tmp_path / "a.py").st_ino == os.stat(tmp_path / "also_a.py").st_ino
    # -o writes a copy, leaving the links as they are
    status, out, err = _run(capsys, tmp_path / "a.py", "-o", tmp_path / "out")
    assert status == 0, out + err
    assert (tmp_path / "out" / "a.py").read_text() == MIGRATED


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_in_place_keeps_the_owner(tmp_path, capsys):
    _tree(tmp_path, ["theirs.py"])
    os.chown(tmp_path / "theirs.py", 12345, 23456)
    status, out, err = _run(capsys, tmp_path / "theirs.py", "--in-place")
    assert status == 0, out + err
    info = os.stat(tmp_path / "theirs.py")
    assert (info.st_uid, info.st_gid) == (12345, 23456)
    assert (tmp_path / "theirs.py").read_text() == MIGRATED


NOBODY = 65534


@pytest.fixture
def open_tmp():
    """A folder any user may enter (pytest's own is its owner's alone)."""
    path = tempfile.mkdtemp(prefix="pmapkit-migrate-test-")
    os.chmod(path, 0o755)
    try:
        yield pathlib.Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _unprivileged():
    """Runs the block as user ``nobody`` where this is root (root reads and
    writes whatever the permission bits say); as this user otherwise."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def test_a_file_whose_owner_cannot_be_kept_is_refused(open_tmp, capsys):
    if os.geteuid() != 0:
        pytest.skip("needs a file of another user's in a folder this user may write")
    _tree(open_tmp, ["root_owns.py"])
    os.chmod(open_tmp, 0o777)                 # nobody may replace it, not keep its owner
    _run(capsys, open_tmp / "root_owns.py", "--diff")     # warm: every module imported
    with _unprivileged():
        status, out, err = _run(capsys, open_tmp / "root_owns.py", "--in-place")
    assert status == 2, out + err
    assert (f"refusing to write {str(open_tmp / 'root_owns.py')!r}: it belongs to uid 0 "
            "gid 0, which this user cannot give the new file") in err
    assert (open_tmp / "root_owns.py").read_text() == CLASSIC
    assert os.stat(open_tmp / "root_owns.py").st_uid == 0
    assert sorted(os.listdir(open_tmp)) == ["root_owns.py"]


@pytest.mark.parametrize("case", ["unreadable file", "unreadable folder", "unwritable output",
                                  "unwritable in place"])
def test_a_permission_error_is_a_usage_error_with_exit_2(open_tmp, capsys, case):
    _tree(open_tmp, ["src/a.py", "src/deep/b.py"])
    os.makedirs(open_tmp / "locked")
    if os.geteuid() == 0:        # nobody reads src and may write there, not in locked/
        for here, dirs, names in os.walk(open_tmp / "src"):
            for name in dirs + names:
                os.chown(os.path.join(here, name), NOBODY, NOBODY)
        os.chown(open_tmp / "src", NOBODY, NOBODY)
    os.chmod(open_tmp / "locked", 0o555)
    target = {"unreadable file": open_tmp / "src/deep/b.py",
              "unreadable folder": open_tmp / "src/deep",
              "unwritable in place": open_tmp / "src/deep"}.get(case)
    if target is not None:
        os.chmod(target, 0o555 if case == "unwritable in place" else 0)
    args = {"unreadable file": [open_tmp / "src", "-o", open_tmp / "out"],
            "unreadable folder": [open_tmp / "src", "-o", open_tmp / "out"],
            "unwritable output": [open_tmp / "src", "-o", open_tmp / "locked" / "out"],
            "unwritable in place": [open_tmp / "src", "--in-place"]}[case]
    message = {"unreadable file": f"cannot read {str(open_tmp / 'src/deep/b.py')!r}: "
                                  "Permission denied",
               "unreadable folder": f"cannot read the folder {str(open_tmp / 'src/deep')!r}: "
                                    "Permission denied",
               "unwritable output": f"cannot write {str(open_tmp / 'locked/out/a.py')!r}: no "
                                    "permission to write in the folder "
                                    f"{str(open_tmp / 'locked')!r}",
               "unwritable in place": f"cannot write {str(open_tmp / 'src/deep/b.py')!r}: no "
                                      "permission to write in the folder "
                                      f"{str(open_tmp / 'src/deep')!r}"}[case]
    _run(capsys, open_tmp / "src" / "a.py", "--diff")     # warm: every module imported
    try:
        with _unprivileged():
            status, out, err = _run(capsys, *args)
    finally:
        os.chmod(open_tmp / "src/deep", 0o755)
        os.chmod(open_tmp / "src/deep/b.py", 0o644)
    assert status == 2, out + err
    assert err.startswith("usage: pmapkit migrate PATH...")
    assert f"pmapkit migrate: error: {message}" in err and "nothing written" in err, err
    assert "Traceback" not in err
    assert (open_tmp / "src/a.py").read_text() == CLASSIC
    assert (open_tmp / "src/deep/b.py").read_text() == CLASSIC
    assert not (open_tmp / "out").exists() and os.listdir(open_tmp / "locked") == []


def test_a_users_own_output_folder_gets_no_marker_and_is_migrated_later(tmp_path, capsys):
    _tree(tmp_path, ["project/train.py"])
    (tmp_path / "project" / "mine").mkdir()          # the user's folder, made beforehand
    (tmp_path / "project" / "mine" / "notes.py").write_text(CLASSIC)
    status, out, err = _run(capsys, tmp_path / "project" / "train.py",
                            "-o", tmp_path / "project" / "mine")
    assert status == 0, out + err
    assert sorted(os.listdir(tmp_path / "project" / "mine")) == ["notes.py", "train.py"]
    # A later run over the project migrates the user's folder like any other.
    status, out, err = _run(capsys, tmp_path / "project", "-o", tmp_path / "modern")
    assert status == 0, out + err
    assert "skipped" not in out and "3 file(s):" in out
    assert (tmp_path / "modern" / "mine" / "notes.py").read_text() == MIGRATED
    # the folder this run made is marked; the next run over the tree skips it
    assert sorted(os.listdir(tmp_path / "modern")) == [files.MARKER, "mine", "train.py"]
