"""The ``pmapkit`` command keeps the habits of the ecosystem's tools:
``--version``; ``-h``/``--help`` on every subcommand, printing plain text
and doing nothing else; the program named as it was typed; a quiet exit
when the reader of its output goes away (``pmapkit --help | head -1``)."""
import os
import re
import subprocess
import sys
import sysconfig

import jax
import pytest

import pmapkit
from pmapkit.tools import cli

PYTHON_M = [sys.executable, "-m", "pmapkit"]
AS_MODULE = f"{os.path.basename(sys.executable)} -m pmapkit"
TIMEOUT_S = 120
# reST and Markdown markup that has no place in terminal help.
MARKUP = re.compile(r"``|`[^`\s]|:(func|class|mod|meth|attr):|\.\. \w+::")


def _console_script():
    path = os.path.join(sysconfig.get_path("scripts"), "pmapkit")
    if not os.path.exists(path):
        pytest.skip(f"no pmapkit console script at {path}")
    return path


def _run(args, cwd, **kw):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, **kw)


@pytest.mark.parametrize("command", cli.COMMANDS)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_every_subcommand_has_help_and_it_only_prints(command, flag, tmp_path,
                                                      monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["pmapkit", command, flag])
    assert cli.main([command, flag], prog="pmapkit") == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: pmapkit {command}"), out[:200]
    assert err == ""
    assert not MARKUP.search(out), MARKUP.search(out).group(0)
    # Nothing ran: no demo output, no benchmark, no file written.
    assert "pmapkit.pmap and jax.pmap agree" not in out and "µs" not in out
    assert list(tmp_path.iterdir()) == []


def test_the_top_level_help_lists_every_command_in_plain_text(capsys):
    for flag in ("-h", "--help"):
        assert cli.main([flag], prog="pmapkit") == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: pmapkit [-h] [--version]")
        for command in cli.COMMANDS:
            assert re.search(rf"^  {command} ", out, re.M), (command, out)
        assert not MARKUP.search(out), MARKUP.search(out).group(0)
        assert max(len(line) for line in out.splitlines()) <= 80


def test_version_names_pmapkit_jax_and_jaxlib(capsys):
    assert cli.main(["--version"], prog="pmapkit") == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"pmapkit {pmapkit.__version__} (jax {jax.__version__}, "
                          f"jaxlib "), out
    assert "\n" not in out


def test_the_program_is_named_as_typed(tmp_path):
    """The console script says `pmapkit bench`, `python -m pmapkit` says so;
    a usage error names it the same way."""
    script = _run([_console_script(), "bench", "--help"], tmp_path)
    assert script.returncode == 0, script.stderr
    assert script.stdout.startswith("usage: pmapkit bench "), script.stdout[:200]
    module = _run(PYTHON_M + ["bench", "--bogus"], tmp_path)
    assert module.returncode == 2
    assert module.stderr.startswith(f"usage: {AS_MODULE} bench "), module.stderr[:300]
    assert f"{AS_MODULE} bench: error: unrecognized arguments: --bogus" in module.stderr
    version = _run(PYTHON_M + ["--version"], tmp_path)
    assert version.returncode == 0
    assert version.stdout.startswith(f"pmapkit {pmapkit.__version__} (jax ")


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["migrate", "--help"]])
def test_a_closed_pipe_ends_the_command_quietly(args, tmp_path):
    """`pmapkit --help | head -1`: the reader is gone before the help is
    written. No traceback; the status is Python's for a failed write (1),
    or 0 where argparse dropped the write error itself."""
    read_end, write_end = os.pipe()
    os.close(read_end)   # every write to the pipe now fails with EPIPE
    try:
        proc = subprocess.run(PYTHON_M + args, cwd=tmp_path, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S)
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode in (0, 1)


def test_an_unknown_command_names_the_program(capsys):
    assert cli.main(["frobnicate"], prog="pmapkit") == 2
    err = capsys.readouterr().err
    assert "pmapkit: unknown command 'frobnicate'" in err and "pmapkit --help" in err


@pytest.mark.parametrize("args", [["--version"], ["-h"], ["help"]]
                         + [[command, "-h"] for command in cli.COMMANDS]
                         + [["launch"], ["migrate"], ["run"]])
def test_help_version_and_usage_errors_answer_without_jax(args, tmp_path):
    """Nothing that only parses the command line imports jax (seconds on a
    loaded machine): a ``jax`` that raises on import stands first on the
    path, and the command still answers as it does with the real one."""
    poisoned = tmp_path / "poisoned"
    (poisoned / "jax").mkdir(parents=True)
    (poisoned / "jax" / "__init__.py").write_text(
        "raise ImportError('the command imported jax')\n")
    env = dict(os.environ, PYTHONPATH=str(poisoned))
    command = [_console_script()] if args == ["--version"] else PYTHON_M
    proc = _run(command + args, tmp_path, env=env)
    assert "the command imported jax" not in proc.stderr, proc.stderr[-2000:]
    usage_error = len(args) == 1 and args[0] in cli.COMMANDS
    assert proc.returncode == (2 if usage_error else 0), proc.stderr[-2000:]
    assert (proc.stderr if usage_error else proc.stdout).startswith(
        ("usage:", f"pmapkit {pmapkit.__version__} (jax ")), (proc.stdout, proc.stderr)


@pytest.mark.parametrize("args", [["demo"], ["bench", "--quick"]])
def test_without_jax_the_command_says_so_in_one_line(args, tmp_path):
    """``python -m pmapkit demo`` where jax is not installed: one line naming
    what is missing and what to install, status 1, no traceback. Python
    without its site-packages (``-S``), pmapkit alone on its path: no jax.
    The package is linked into an empty folder, since an installed pmapkit's
    own parent is the site-packages that holds jax."""
    alone = tmp_path / "pmapkit_alone"
    alone.mkdir()
    (alone / "pmapkit").symlink_to(os.path.dirname(os.path.abspath(pmapkit.__file__)))
    env = dict(os.environ, PYTHONPATH=str(alone))
    proc = _run([sys.executable, "-S", "-m", "pmapkit", *args], tmp_path, env=env)
    notice = [line for line in proc.stderr.splitlines()
              if not line.startswith("pmapkit: pure-Python build")]
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-2000:]
    assert len(notice) == 1, proc.stderr[-2000:]
    assert notice[0].startswith(f"{AS_MODULE}: ") and " is not installed for " in notice[0]
    assert "pip install 'jax>=0.10.2,<0.11'" in notice[0]
