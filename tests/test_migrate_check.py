"""``pmapkit migrate --check`` is a proof: outputs compared as bytes, numbers
equal unless a tolerance is given (integers, inf and nan never within one),
``--ignore``d lines skipped and counted, the first differing lines shown; the
two runs one after the other, each in its own copy of the program's folder,
stdin from /dev/null or ``--stdin``, stopped at ``--timeout``; the user's
folder never touched.

The comparison tests come first (in this process, fast); then real runs of
small programs through ``command.main`` in this process, so that
``tests/migrate_mutations.py --check`` reaches them with a mutant of
``check``/``check_runs`` loaded."""
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from pmapkit.tools.migrate import check, check_runs, command


def _same(a, b, **tolerance):
    return check.same_line(a, b, check.Options(**tolerance))


def _ran(code, out, err, timed_out=False):
    return check.Run(code, out, err, timed_out)


# -- numbers ------------------------------------------------------------------

def test_without_a_tolerance_every_byte_counts():
    assert _same(b"loss 0.25 step 3\n", b"loss 0.25 step 3\n")
    assert not _same(b"loss 0.1234567\n", b"loss 0.1234568\n")
    assert not _same(b"0.5\n", b"0.50\n")          # equal floats, other bytes
    assert not _same(b"x 1.0\n", b"x 1.0\r\n")     # line endings are bytes too


def test_floats_within_a_tolerance_and_only_floats():
    assert _same(b"loss 0.1234567 step 3", b"loss 0.1234568 step 3", rtol=1e-5)
    assert _same(b"[1. 2.5e-01]", b"[1.0000001 2.5000001e-01]", rtol=1e-5)
    assert not _same(b"loss 0.1234 step 3", b"loss 0.1240 step 3", rtol=1e-5)
    # the text around the numbers is still compared byte for byte
    assert not _same(b"loss 0.5", b"cost 0.5", rtol=1)
    assert not _same(b"loss 0.5 step 3", b"loss 0.5 step 4", rtol=1, atol=1)


def test_integers_inf_and_nan_are_never_within_a_tolerance():
    wide = {"rtol": 0.5, "atol": 1.0}
    assert not _same(b"1000001\n", b"1000000\n", **wide)
    assert not _same(b"steps 7", b"steps 8", **wide)
    assert not _same(b"0.5\n", b"inf\n", **wide)
    assert not _same(b"inf", b"0.5", **wide)
    assert not _same(b"[nan 1.]", b"[0.5 1.]", **wide)
    assert not _same(b"-inf", b"inf", **wide)
    assert not _same(b"1.0", b"1", **wide)         # a float is not an integer
    assert not _same(b"1e400", b"2.5", **wide)     # past the float range: no tolerance
    assert _same(b"[nan inf 1.]", b"[nan inf 1.0000001]", rtol=1e-5)


def test_rtol_is_relative_to_the_original_and_atol_absolute():
    assert _same(b"100.0", b"100.0009", rtol=1e-5)
    assert not _same(b"100.0", b"100.0011", rtol=1e-5)
    assert _same(b"0.0", b"1e-07", atol=1e-6)
    assert not _same(b"0.0", b"1e-05", atol=1e-6)
    assert _same(b"0.0", b"1.5e-06", atol=1e-6, rtol=1e-5) is False
    assert _same(b"1.0", b"1.5", rtol=0.5)         # 0.5 * |1.0|
    assert not _same(b"1.0", b"2.0", rtol=0.5)     # 0.5 * |1.0|, not 0.5 * |2.0|


# -- the verdict ----------------------------------------------------------------------

def test_same_says_how_lines_were_compared():
    same = check.compare("a.py", "b.py", _ran(0, b"x 1.0\ny 2\n", b""),
                         _ran(0, b"x 1.0\ny 2\n", b""))
    assert same.same
    assert same.format() == "check a.py: same: exit status 0, 2 stdout lines agree byte for byte"
    close = check.compare("a.py", "b.py", _ran(0, b"x 1.0\n", b""), _ran(0, b"x 1.000001\n", b""),
                          check.Options(rtol=1e-5))
    assert close.same and close.format() == (
        "check a.py: same: exit status 0, 1 stdout lines agree with floats within --rtol "
        "1e-05 --atol 0 (integers, inf and nan exactly)")


def test_different_shows_the_first_differing_lines():
    original = b"".join(b"line %d\n" % k for k in range(1, 11))
    migrated = original.replace(b"line 4\n", b"line four\n").replace(b"line 5\n", b"5\n") \
        .replace(b"line 6\n", b"six\n").replace(b"line 7\n", b"seven\n")
    verdict = check.compare("a.py", "b.py", _ran(0, original, b""), _ran(0, migrated, b""))
    assert verdict.outcome == check.DIFFERENT
    assert verdict.format() == (
        "check a.py: DIFFERENT: stdout differs (10 original and 10 migrated lines compared "
        "byte for byte)\n"
        "    original line 4: line 4\n    migrated line 4: line four\n"
        "    original line 5: line 5\n    migrated line 5: 5\n"
        "    original line 6: line 6\n    migrated line 6: six")
    shorter = check.compare("a.py", "b.py", _ran(0, b"a\nb\n", b""), _ran(0, b"a\n", b""))
    assert shorter.format().endswith("    original line 2: b\n"
                                     "    migrated after the last line: <no line>")
    ends = check.compare("a.py", "b.py", _ran(0, b"a\r\nb", b""), _ran(0, b"a\nb\n", b""))
    assert ends.format().endswith("    original line 1: b'a\\r\\n'\n"
                                  "    migrated line 1: b'a\\n'\n"
                                  "    original line 2: b  <no newline at the end>\n"
                                  "    migrated line 2: b")


def test_bytes_that_are_not_utf8_are_compared_and_shown():
    same = check.compare("a.py", "b.py", _ran(0, b"\xff\xfe ok\n", b""),
                         _ran(0, b"\xff\xfe ok\n", b""))
    assert same.same
    differ = check.compare("a.py", "b.py", _ran(0, b"\xff 1\n", b""), _ran(0, b"\xfe 1\n", b""))
    assert differ.format().endswith("    original line 1: \\xff 1\n"
                                    "    migrated line 1: \\xfe 1")
    failed = check.compare("a.py", "b.py", _ran(0, b"", b""), _ran(1, b"", b"Error: \xff\n"))
    assert "Error: \\xff" in failed.format()


def test_control_bytes_are_shown_escaped():
    # A colour code, a tab and a bell, a zero-width space: raw, the two
    # lines would look the same on a terminal.
    verdict = check.compare("a.py", "b.py",
                            _ran(0, b"loss \x1b[31m0.5\x1b[0m\n50%\t\x07100%\nab\n", b""),
                            _ran(0, "loss \x1b[32m0.5\x1b[0m\n50%\t\x0799%\na\u200bb\n"
                                 .encode(), b""))
    assert verdict.format().endswith(
        "    original line 1: loss \\x1b[31m0.5\\x1b[0m\n"
        "    migrated line 1: loss \\x1b[32m0.5\\x1b[0m\n"
        "    original line 2: 50%\\t\\x07100%\n    migrated line 2: 50%\\t\\x0799%\n"
        "    original line 3: ab\n    migrated line 3: a\\u200bb")
    assert not {"\x1b", "\t", "\x07", "\u200b"} & set(verdict.format())


def test_a_long_differing_line_is_cut_around_its_first_difference():
    original = b"[" + b"1, " * 1_000_000 + b"2]\n"           # 3 MB on one line
    migrated = original[:1_500_000] + b"7" + original[1_500_001:]
    verdict = check.compare("a.py", "b.py", _ran(0, original, b""), _ran(0, migrated, b""))
    text = verdict.format()
    assert len(text) < 1000, len(text)
    left, right = text.splitlines()[1:]
    at = 1_500_001                   # 1-based: the first differing character
    start = at - check.BEFORE        # the window, 1-based, on both sides
    window = original[start - 1:start - 1 + check.WIDTH].decode()
    assert left == (f"    original line 1: ...{window}...  <characters {start}-"
                    f"{start + check.WIDTH - 1} of 3000003, first difference at {at}>")
    assert right.startswith("    migrated line 1: ..." + migrated[start - 1:at].decode())
    assert migrated[at - 1:at] == b"7" and original[at - 1:at] != b"7"
    short = check.compare("a.py", "b.py", _ran(0, b"x" * 300 + b"a\n", b""),
                          _ran(0, b"x" * 300 + b"\n", b""))
    assert "first difference at 301>" in short.format()
    assert short.format().splitlines()[1].endswith(
        "x" * (check.WIDTH - 1) + "a  <characters 102-301 of 301, first difference at 301>")


def test_ignored_lines_are_skipped_in_both_and_counted():
    ignore = (re.compile(r"took [0-9.]+ s"), re.compile(r"^date"))
    a = b"step 1\nstep 1 took 0.51 s\nloss 0.5\ndate 12:00\n"
    b = b"step 1\nstep 1 took 0.32 s\nloss 0.5\ndate 12:01\n"
    plain = check.compare("a.py", "b.py", _ran(0, a, b""), _ran(0, b, b""))
    assert not plain.same and "original line 2: step 1 took 0.51 s" in plain.format()
    skipped = check.compare("a.py", "b.py", _ran(0, a, b""), _ran(0, b, b""),
                            check.Options(ignore=ignore))
    assert skipped.same, skipped.format()
    assert skipped.format() == (
        "check a.py: same: exit status 0, 2 stdout lines agree byte for byte; skipped by "
        "--ignore 'took [0-9.]+ s', '^date': 2 original and 2 migrated lines")
    # the line numbers shown are the outputs' own
    worse = check.compare("a.py", "b.py", _ran(0, a, b""),
                          _ran(0, b.replace(b"loss 0.5", b"loss 0.6"), b""),
                          check.Options(ignore=ignore))
    assert "skipped by --ignore" in worse.format()
    assert worse.format().endswith("    original line 3: loss 0.5\n"
                                   "    migrated line 3: loss 0.6")


def test_exit_statuses_and_timeouts():
    failed = check.compare("a.py", "b.py", _ran(0, b"x\n", b""),
                           _ran(1, b"x\n", b"Traceback\nValueError: no\n"))
    assert failed.outcome == check.DIFFERENT
    assert "exit status 0 (original) vs 1 (migrated)" in failed.format()
    assert "ValueError: no" in failed.format()
    original = check.compare("a.py", "b.py", _ran(2, b"x\n", b"Error: bad\n"), _ran(2, b"x\n", b""))
    assert original.outcome == check.UNPROVEN and "Error: bad" in original.format()
    late = check.compare("a.py", "b.py", _ran(-9, b"", b"", True), _ran(0, b"", b""),
                         check.Options(timeout=7))
    assert late.outcome == check.UNPROVEN
    assert "the original ran past the --timeout of 7 s" in late.format()
    slow = check.compare("a.py", "b.py", _ran(0, b"", b""), _ran(-9, b"", b"", True),
                         check.Options(timeout=7))
    assert slow.outcome == check.DIFFERENT
    assert "the migrated run ran past the --timeout of 7 s" in slow.format()


# -- real runs --------------------------------------------------------------------

# Each prints one thing under ``pmapkit run`` (the original) and another on
# plain Python (the migrated run): what a wrong translation would do.
CLASSIC_VS_PLAIN = 'import sys\nclassic = "pmapkit" in sys.modules\n'


def _main(capsys, *args):
    status = command.main(list(map(str, args)))
    out, err = capsys.readouterr()
    return status, out, err


def _write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def _listing(folder):
    return sorted(os.path.relpath(os.path.join(here, name), folder)
                  for here, dirs, names in os.walk(folder) for name in dirs + names)


def test_a_program_writing_beside_itself_leaves_the_users_folder_alone(tmp_path, capsys):
    # Writes next to itself and in its working folder; each run must find
    # neither (a fresh copy each), the user's folder must gain nothing.
    src = tmp_path / "src"
    _write(src, "data/input.txt", "42\n")
    program = _write(src, "writes.py", '''\
        import os
        import jax
        here = os.path.dirname(os.path.abspath(__file__))
        for path in (os.path.join(here, "beside.txt"), "in_cwd.txt", "data/input.txt"):
            print(path.rpartition("/")[2], "seen" if os.path.exists(path) and
                  open(path).read() != "42\\n" else "fresh")
            with open(path, "a") as f:
                f.write("written\\n")
        print(os.getcwd() == here, jax.tree_map(lambda a: a + 1, [1]))
        ''')
    before = _listing(src)
    status, out, err = _main(capsys, program, "--check")
    assert status == 0, out + err
    assert f"check {program}: same: exit status 0, 4 stdout lines agree byte for byte" in out
    assert _listing(src) == before
    assert (src / "data/input.txt").read_text() == "42\n"
    assert not [n for n in os.listdir(src) if n.startswith(".pmapkit")]


def test_the_two_runs_are_one_after_the_other(tmp_path, capsys):
    log = tmp_path / "log.txt"         # outside the program's folder: shared on purpose
    program = _write(tmp_path / "src", "slow.py", '''\
        import os, sys, time
        with open(sys.argv[1], "a") as f:
            f.write(f"start {os.getpid()}\\n")
        time.sleep(1.5)
        with open(sys.argv[1], "a") as f:
            f.write(f"end {os.getpid()}\\n")
        print("done")
        ''')
    status, out, err = _main(capsys, program, "--check", "--", log)
    assert status == 0, out + err
    lines = log.read_text().split()
    assert lines[0::4] == ["start", "start"] and lines[2::4] == ["end", "end"], lines
    assert lines[1] == lines[3] and lines[5] == lines[7] and lines[1] != lines[5]


def test_stdin_is_dev_null_or_the_given_file(tmp_path, capsys):
    program = _write(tmp_path / "src", "reads.py", '''\
        import sys
        data = sys.stdin.read()
        print(repr(data))
        sys.exit(0 if data in ("", "hello\\n") else 5)
        ''')
    # Whatever this process's stdin holds, neither run reads it.
    read_end, write_end = os.pipe()
    os.write(write_end, b"leaked from the terminal\n")
    os.close(write_end)
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        status, out, err = _main(capsys, program, "--check")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read_end)
    assert status == 0 and f"check {program}: same: exit status 0, 1 stdout" in out, out + err
    given = tmp_path / "given.txt"
    given.write_text("hello\n")
    status, out, err = _main(capsys, program, "--check", "--stdin", given)
    assert status == 0 and f"check {program}: same: exit status 0, 1 stdout" in out, out + err
    given.write_text("other\n")
    status, out, err = _main(capsys, program, "--check", "--stdin", given)
    assert status == 1 and "UNPROVEN: the original failed (exit status 5)" in out, out + err


def test_the_issue_cases_are_different_even_with_a_tolerance(tmp_path, capsys):
    # printed 1000001 for 1000000, 0.5 for inf, and bytes that are not UTF-8
    folder = tmp_path / "src"
    _write(folder, "count.py",
           CLASSIC_VS_PLAIN + 'print("rows", 1000000 if classic else 1000001)\n')
    _write(folder, "limit.py",
           CLASSIC_VS_PLAIN + 'print("max", float("inf") if classic else 0.5)\n')
    _write(folder, "raw.py", CLASSIC_VS_PLAIN
           + 'sys.stdout.buffer.write(b"\\xff\\xfe " + (b"1.0" if classic else b"1.5") + b"\\n")\n')
    _write(folder, "close.py", CLASSIC_VS_PLAIN + 'print("loss", 0.25 if classic else 0.2500001)\n')
    status, out, err = _main(capsys, folder, "--check", "--rtol", "1e-3", "--atol", "1")
    assert status == 1, out + err
    assert "Traceback" not in out + err
    assert (f"check {folder / 'count.py'}: DIFFERENT: stdout differs (1 original and 1 "
            "migrated lines compared with floats within --rtol 0.001 --atol 1 (integers, "
            "inf and nan exactly))\n"
            "    original line 1: rows 1000000\n    migrated line 1: rows 1000001") in out
    assert ("    original line 1: max inf\n    migrated line 1: max 0.5") in out
    assert f"check {folder / 'close.py'}: same: exit status 0, 1 stdout lines agree with " \
        "floats within --rtol 0.001 --atol 1" in out
    # the tolerance lets the float through, the bytes around it stay compared
    assert f"check {folder / 'raw.py'}: same:" in out
    status, out, err = _main(capsys, folder / "close.py", folder / "raw.py", "--check")
    assert status == 1 and "migrated line 1: loss 0.2500001" in out, out + err
    assert "    original line 1: \\xff\\xfe 1.0\n    migrated line 1: \\xff\\xfe 1.5" in out


def test_ignore_skips_timing_lines_of_real_runs(tmp_path, capsys):
    program = _write(tmp_path / "src", "timed.py", '''\
        import time
        start = time.perf_counter()
        print("sum", sum(range(10)))
        print(f"took {time.perf_counter() - start + time.time_ns() % 1000:.9f} s")
        ''')
    status, out, err = _main(capsys, program, "--check")
    assert status == 1 and "original line 2: took" in out, out + err
    status, out, err = _main(capsys, program, "--check", "--ignore", r"took \S+ s")
    assert status == 0, out + err
    assert (f"check {program}: same: exit status 0, 1 stdout lines agree byte for byte; "
            r"skipped by --ignore 'took \\S+ s': 1 original and 1 migrated lines") in out


def test_timeout_stops_a_run(tmp_path, capsys):
    # Runs that never end: the --timeout is what stops them. Neither program
    # imports jax (nor does the activation, which waits for jax's import), so
    # 15 s is well past a loaded start.
    folder = tmp_path / "src"
    _write(folder, "hangs.py", "import time\ntime.sleep(10 ** 6)\nprint('woke')\n")
    _write(folder, "hangs_migrated.py",
           CLASSIC_VS_PLAIN + "import time\nif not classic:\n    time.sleep(10 ** 6)\n"
           "print('ok')\n")
    status, out, err = _main(capsys, folder, "--check", "--timeout", "15")
    assert status == 1, out + err
    assert (f"check {folder / 'hangs.py'}: UNPROVEN: the original ran past the --timeout of "
            "15 s and was stopped") in out
    assert (f"check {folder / 'hangs_migrated.py'}: DIFFERENT: the migrated run ran past "
            "the --timeout of 15 s") in out


# A program that leaves a server behind: a grandchild detached from it
# (double fork, ``setsid``) that holds the program's stdout and never ends;
# it writes its pid to argv[1]. argv[2] == "hang": the program never ends either.
DETACHES = """\
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
print("server started", flush=True)
if sys.argv[2] == "hang":
    time.sleep(10 ** 6)
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["hang", "ends"])
def test_a_detached_child_is_killed_with_its_run(tmp_path, how):
    # Plain Python, no jax: the 8 s timeout bounds a run that never ends,
    # not a start. A detached child outliving the run held its stdout open:
    # the check waited for it for ever.
    script = _write(tmp_path, "server.py", DETACHES)
    pidfile = tmp_path / "server.pid"
    ran = check_runs.run([sys.executable, str(script), str(pidfile), how], tmp_path,
                         check.Options(timeout=8))
    server = int(pidfile.read_text())
    assert not _alive(server)
    assert ran.stdout == b"server started\n"
    assert ran.timed_out == (how == "hang")
    assert ran.returncode == (0 if how == "ends" else -signal.SIGKILL), ran


def test_the_run_is_its_own_subreapers_child_and_nothing_else_is_killed(tmp_path):
    # A process of this test, started before the run and outside it, lives on.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        script = _write(tmp_path, "server.py", DETACHES)
        check_runs.run([sys.executable, str(script), str(tmp_path / "pid"), "ends"],
                       tmp_path, check.Options(timeout=8))
        assert _alive(bystander.pid) and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


# Three programs whose two runs must agree: each printed something that the
# old check made differ (a set of strings: the hash seed; a DeprecationWarning
# of the program's own: an error in the migrated run only; ``__loader__`` and
# ``__spec__``: runpy's, not ``python script.py``'s).
FALSE_ALARMS = {
    "prints_a_set.py": 'print({"alpha", "beta", "gamma", "delta", "epsilon"})\n'
                       'print(list({str(k): k for k in range(20)}.items())[:3])\n',
    "own_deprecation.py": "import warnings\n"
                          "warnings.warn('old helper', DeprecationWarning)\n"
                          "def old():\n"
                          "    warnings.warn('old()', DeprecationWarning, stacklevel=2)\n"
                          "    return 1\n"
                          "print(old() + old())\n",
    "loader.py": "print(type(__loader__).__name__, __loader__.name, __spec__, __package__,\n"
                 "      __cached__, __name__, __file__ == __loader__.path)\n",
}


def test_the_three_false_alarms_are_same(tmp_path, capsys):
    folder = tmp_path / "src"
    for name, text in FALSE_ALARMS.items():
        _write(folder, name, text)
    status, out, err = _main(capsys, folder, "--check")
    assert status == 0, out + err
    for name in FALSE_ALARMS:
        assert f"check {folder / name}: same: exit status 0" in out, out
    # and python itself prints what the migrated run printed for __loader__
    direct = subprocess.run([sys.executable, str(folder / "loader.py")], capture_output=True,
                            text=True, check=True)
    assert direct.stdout.startswith("SourceFileLoader __main__ None None None __main__ True")


def test_jax_deprecations_fail_the_migrated_run_and_no_others(tmp_path):
    # ``with mesh:`` is deprecated by JAX 0.10 itself: the migrated run fails
    # there; the program's own DeprecationWarning before it did not.
    script = _write(tmp_path, "mesh.py", """\
        import warnings
        import jax
        warnings.warn("mine", DeprecationWarning)
        print("own warning passed", flush=True)
        mesh = jax.sharding.Mesh(jax.devices()[:1], ("x",))
        with mesh:
            print("inside")
        """)
    ran = check_runs.run(check_runs.migrated_command(str(script), []), tmp_path,
                         check.Options())
    assert ran.stdout == b"own warning passed\n"
    assert ran.returncode == 1
    assert b"DeprecationWarning: `with mesh:` context manager has been deprecated" in \
        ran.stderr.splitlines()[-1]
    assert ran.stderr.count(b"DeprecationWarning: mine") == 1


def test_the_migrated_files_run_in_place_of_the_originals(tmp_path, capsys):
    # A module beside the program is migrated too: the migrated run imports
    # the migrated one (the original, classic, would fail on plain JAX).
    folder = tmp_path / "src"
    _write(folder, "model.py",
           "import jax\ndef double(t):\n    return jax.tree_map(lambda a: 2 * a, t)\n")
    _write(folder, "main.py", "import model\nprint(model.double([1, 2]))\n")
    status, out, err = _main(capsys, folder, "--check")
    assert status == 0, out + err
    assert f"check {folder / 'main.py'}: same" in out
    assert "jax.tree_map" in (folder / "model.py").read_text()


def test_links_leading_out_still_lead_there_and_large_folders_are_refused(tmp_path, capsys):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "values.txt").write_text("3 4\n")
    folder = tmp_path / "src"
    program = _write(folder, "reads_link.py", "print(open('data/values.txt').read().split())\n")
    os.symlink(os.path.join("..", "shared"), folder / "data")
    (folder / ".git").mkdir()
    (folder / ".git" / "pack").write_bytes(b"\0" * (3 * 2 ** 20))    # never copied
    status, out, err = _main(capsys, program, "--check", "--copy-limit", "1")
    assert status == 0, out + err
    assert f"check {program}: same" in out
    (folder / "weights.bin").write_bytes(b"\0" * (2 * 2 ** 20))
    status, out, err = _main(capsys, program, "--check", "--copy-limit", "1")
    assert status == 2, out + err
    assert (f"--check runs each program in a copy of its folder, and {str(folder)!r} holds "
            "more than 1 MiB of files (--copy-limit); nothing was run") in err
    assert "check " not in out


@pytest.mark.parametrize("args, message", [
    (["--rtol", "1e-3"], "--rtol is for --check"),
    (["--ignore", "x"], "--ignore is for --check"),
    (["--timeout", "5"], "--timeout is for --check"),
    (["--check", "--rtol", "-1"], "argument --rtol: a number >= 0, not '-1'"),
    (["--check", "--atol", "nan"], "argument --atol: a number >= 0, not 'nan'"),
    (["--check", "--timeout", "0"], "argument --timeout: a number > 0, not '0'"),
    (["--check", "--ignore", "("], "argument --ignore: not a regular expression: '('"),
    (["--check", "--stdin", "missing.txt"], "--stdin missing.txt: No such file or directory"),
])
def test_bad_check_options_are_usage_errors(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "a.py", "print(1)\n")
    with pytest.raises(SystemExit) if "argument" in message else _nothing():
        status, out, err = _main(capsys, "a.py", "-o", "out", *args)
        assert status == 2 and message in err, out + err
    if "argument" in message:
        assert message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a.py"]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
