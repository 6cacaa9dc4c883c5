"""Runs a script or a module as ``__main__``, the way ``python`` would.

Used two ways:

* imported (``pmapkit run``): ``run_script`` / ``run_module`` set
  ``sys.argv`` and ``sys.path[0]`` as ``python script.py`` / ``python -m``
  would and let the script's ``SystemExit`` propagate;
* run as a file by ``pmapkit launch`` (each rank is
  ``python .../pmapkit/tools/run.py script.py args`` or ``... -m module args``).
  It imports only the standard library, so the script still imports JAX
  first (JAX reads its environment variables at import). There a rank that
  ends with a non-zero status after joining ``jax.distributed`` leaves at
  once: a normal interpreter exit would run JAX's shutdown, whose barrier
  waits for peers that may be blocked in a collective waiting for this rank,
  and the launcher would only see the failure at its timeout.
"""
import os
import sys

if __name__ == "__main__" and len(sys.argv) > 1 and sys.path and sys.path[0] == \
        os.path.dirname(os.path.abspath(__file__)):
    # Run as a file, python put pmapkit/ itself first on sys.path, where its
    # modules would shadow top-level names: the entry becomes the script's
    # (run_* below set it again) before anything more is imported.
    sys.path[0] = (os.getcwd() if sys.argv[1] == "-m"
                   else os.path.dirname(os.path.abspath(sys.argv[1])))

import atexit  # noqa: E402
import builtins  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import pkgutil  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import types  # noqa: E402

_THIS_FILE = os.path.abspath(__file__)


def run_script(path, args=()):
    """Runs the file ``path`` as ``__main__``, as ``python path args`` does:
    ``sys.argv = [path, *args]`` with ``path`` as typed, ``__file__``
    absolute (the current directory joined, not normalised) and the
    script's directory as ``sys.path[0]``. A folder or zip file runs its
    ``__main__`` module with itself (absolute) as ``sys.path[0]``, and fails
    as python does without one. (runpy.run_path would set ``sys.argv[0]`` to
    the path it is given: the absolute one.)"""
    sys.argv[:] = [path, *args]
    where = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    if os.path.isdir(path) or not os.path.isfile(path) or _is_zip(path):
        _set_first_path_entry(where)
        spec = importlib.machinery.PathFinder.find_spec("__main__", [where])
        if spec is None:
            print(f"{sys.executable}: can't find '__main__' module in {where!r}",
                  file=sys.stderr)
            raise SystemExit(1)
        names = dict(__file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader,
                     __spec__=spec, __package__="")
        code = lambda: spec.loader.get_code("__main__")  # noqa: E731
    else:
        _set_first_path_entry(os.path.dirname(os.path.abspath(path)))
        names = dict(__file__=where, __cached__=None, __spec__=None, __package__=None,
                     __loader__=importlib.machinery.SourceFileLoader("__main__", where))
        code = lambda: _code_of_file(where)  # noqa: E731
    _run_with_short_tracebacks(lambda: _exec_as_main(code(), names))


def _code_of_file(filename):
    """The code of a script file: compiled (``python script.pyc``) or source."""
    with io.open_code(filename) as f:
        code = pkgutil.read_code(f)
    if code is None:
        with io.open_code(filename) as f:
            code = compile(f.read(), filename, "exec", dont_inherit=True)
    return code


def _exec_as_main(code, names):
    """Executes ``code`` in a fresh ``__main__`` module, in sys.modules while
    it runs (pickle finds the script's classes there), as python runs it."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, **names)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def run_stdin(args=()):
    """Runs the program read from standard input as ``__main__``, as
    ``python - args`` does: ``sys.argv[0]`` is ``"-"``, the current directory
    is ``sys.path[0]``, its code is named ``<stdin>``."""
    sys.argv[:] = ["-", *args]
    _set_first_path_entry("")
    source = sys.stdin.read()
    names = dict(__file__="<stdin>", __spec__=None, __loader__=None, __package__=None)
    _run_with_short_tracebacks(
        lambda: _exec_as_main(compile(source, "<stdin>", "exec"), names))


def _is_zip(path):
    import zipfile
    return zipfile.is_zipfile(path)


def run_module(name, args=()):
    """Runs module ``name`` as ``__main__`` (``python -m name args``): the
    current directory is ``sys.path[0]``; a module that cannot be found is
    reported as python reports it, with status 1."""
    sys.argv[:] = [name, *args]    # runpy replaces argv[0] by the module's file
    _set_first_path_entry(os.getcwd())
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:     # a package above it is missing
        found = False
    if not found:
        print(f"{sys.executable}: No module named {name}", file=sys.stderr)
        raise SystemExit(1)
    _run_with_short_tracebacks(
        lambda: runpy.run_module(name, run_name="__main__", alter_sys=True))


def _set_first_path_entry(entry):
    """``sys.path[0]`` is the script's entry, replacing the one python gave the
    command that runs it (its own directory or the current one); with
    ``-P`` (safe path) python gives none, and none is added."""
    if not sys.flags.safe_path:
        sys.path[0] = entry


def _run_with_short_tracebacks(run):
    """Runs ``run()``; an uncaught exception's traceback starts at the user's
    code, as under ``python script.py`` (runpy's and this module's frames are
    dropped), and the process exits with status 1 after it is printed."""
    try:
        run()
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        # As python: the script's frames, then the process ends by SIGINT
        # (status -2 to a parent, 130 in a shell) once exit handlers ran.
        _print_from_user_code(exc)
        _die_by_sigint()
    except BaseException as exc:
        _print_from_user_code(exc)
        raise SystemExit(1) from None


def _print_from_user_code(exc):
    """Print ``exc``'s traceback from the user's first frame on (runpy's, and
    pmapkit's own frames above the script dropped)."""
    tb = exc.__traceback__
    while tb is not None and _is_runner_frame(tb.tb_frame):
        tb = tb.tb_next
    exc.__traceback__ = tb   # what the hook prints, whatever tb it is passed
    sys.excepthook(type(exc), exc, tb)


def _die_by_sigint():
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(130)  # where the signal cannot end the process


def _is_runner_frame(frame):
    if frame is None:
        return False
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
    """``run.py [-m MODULE | SCRIPT] ARGS``: one rank of ``pmapkit launch``."""
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
