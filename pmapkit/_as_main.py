"""Runs a script or a module as ``__main__``, the way ``python`` would.

Used two ways:

* imported (``pmapkit run``): ``run_script`` / ``run_module`` set
  ``sys.argv`` and ``sys.path[0]`` as ``python script.py`` / ``python -m``
  would and let the script's ``SystemExit`` propagate;
* run as a file by ``pmapkit launch`` (each rank is
  ``python .../pmapkit/_as_main.py script.py args`` or ``... -m module args``).
  It imports only the standard library, so the script still imports JAX
  first (JAX reads its environment variables at import). There a rank that
  ends with a non-zero status after joining ``jax.distributed`` leaves at
  once: a normal interpreter exit would run JAX's shutdown, whose barrier
  waits for peers that may be blocked in a collective waiting for this rank,
  and the launcher would only see the failure at its timeout.
"""
import os
import sys

if __name__ == "__main__" and sys.path and sys.path[0] == os.path.dirname(
        os.path.abspath(__file__)):
    # Run as a file, python put pmapkit/ itself first on sys.path, where its
    # modules would shadow top-level names; the script's directory goes
    # there below instead.
    del sys.path[0]

import runpy  # noqa: E402

_THIS_FILE = os.path.abspath(__file__)


def run_script(path, args=()):
    """Runs the file ``path`` as ``__main__`` with ``sys.argv = [path, *args]``
    (``path`` made absolute, as python makes the script's ``__file__``)."""
    path = os.path.abspath(path)
    sys.argv[:] = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    _run_with_short_tracebacks(lambda: runpy.run_path(path, run_name="__main__"))


def run_module(name, args=()):
    """Runs module ``name`` as ``__main__`` (``python -m name args``)."""
    sys.argv[:] = [name, *args]    # runpy replaces argv[0] by the module's file
    sys.path.insert(0, os.getcwd())
    _run_with_short_tracebacks(
        lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


def _run_with_short_tracebacks(run):
    """Runs ``run()``; an uncaught exception's traceback starts at the user's
    code, as under ``python script.py`` (runpy's and this module's frames are
    dropped), and the process exits with status 1 after it is printed."""
    try:
        run()
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and _is_runner_frame(tb.tb_frame):
            tb = tb.tb_next
        exc.__traceback__ = tb   # what the hook prints, whatever tb it is passed
        sys.excepthook(type(exc), exc, tb)
        raise SystemExit(1) from None


def _is_runner_frame(frame):
    filename = frame.f_code.co_filename
    return filename in (_THIS_FILE, runpy.__file__) or filename == "<frozen runpy>"


def exit_status(code):
    """The process status for ``SystemExit(code)``, as the interpreter makes it
    (``None`` is 0, an int is itself, anything else is printed and is 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _joined_distributed_run():
    jax = sys.modules.get("jax")
    try:
        return jax is not None and bool(jax.distributed.is_initialized())
    except Exception:   # a half-imported or unusual jax: no barrier to skip
        return False


def _rank_main(argv):
    """``_as_main.py [-m MODULE | SCRIPT] ARGS``: one rank of ``pmapkit launch``."""
    try:
        if argv[0] == "-m":
            run_module(argv[1], argv[2:])
        else:
            run_script(argv[0], argv[1:])
    except SystemExit as exc:
        if not _joined_distributed_run():
            raise
        status = exit_status(exc.code)
        if status == 0:
            raise      # a clean exit: JAX's shutdown barrier is wanted
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


if __name__ == "__main__":
    _rank_main(sys.argv[1:])
