"""The ``pmapkit`` command (also ``python -m pmapkit``): picks the subcommand
and hands it the rest of the command line.

Habits every subcommand keeps: ``-h``/``--help`` prints and does nothing
else; messages name the program as it was typed (``pmapkit bench`` from the
console script, ``python -m pmapkit bench`` from ``-m``); a reader that closes
the pipe early (``pmapkit --help | head -1``) ends the command quietly.
"""
import os
import sys

COMMANDS = ("demo", "bench", "launch", "run", "migrate")
#: The name of the console script (pyproject.toml's ``[project.scripts]``).
SCRIPT_NAME = "pmapkit"

HELP = """\
usage: {prog} [-h] [--version] [COMMAND] [options]

JAX's classic parallel layer (pmap, pjit, host_callback, export,
colocated_python) on jax 0.10, and the tools around it.

commands:
  demo      data-parallel training on 8 simulated CPU devices, checked against
            jax.pmap, and the cost of one step beside jax.pmap and jax.jit
            (the default)
  bench     per-call dispatch and feature benchmarks, side by side with JAX
  launch    run a script in N local processes joined by jax.distributed
  run       run an old JAX script unedited: pmapkit stands in for what this
            JAX removed (--report lists the classic names it used)
  migrate   rewrite classic JAX code to plain modern JAX

options:
  -h, --help  show this message and exit
  --version   show the versions of pmapkit, jax and jaxlib and exit

'{prog} COMMAND --help' shows a command's options, e.g. '{prog} bench --help'."""

RUN_USAGE = """\
usage: {prog} [--route-pmap] [--modern-prng] [--report[=FORM]] script.py [args ...]
       {prog} [options] -m module [args ...]
       {prog} [options] -c code [args ...]
       {prog} [options] notebook.ipynb [args ...]
       {prog} [options] command [args ...]

Runs an old JAX program unedited, as python would run it (sys.argv,
__main__, __file__, exit status): a script, a folder or zip file with a
__main__.py, a pipe or device (/dev/fd/N), - for the script on stdin,
-m module, -c code; a notebook's code cells in order (as 'ipython
notebook.ipynb' does); a command found on PATH (pytest, a console script
or any program). The classic layer is on for the program and every Python
process it starts (multiprocessing workers, a child python, pytest), each
installing it when it imports jax (pmapkit.legacy.install()):
pmapkit's classic APIs stand in for the modules and names this JAX lacks
(jax.experimental.pjit, .maps, .PartitionSpec, .host_callback,
.jax2tf.jax_export, .export; jax.device_put_replicated/_sharded) and the
other removed names classic programs use (jax.tree_map, jax.ops.index_update,
Array.device_buffers, jax.experimental.optimizers/stax, jax.config, ...):
every public name of jax 0.1.77 to 0.9.2 works, or raises an error naming
the release that removed it and its replacement (docs/classic-names.md).
jax.random draws are the classic releases' (jax_threefry_partitionable off,
as before JAX 0.5). One short line on stderr counts what was installed.

options:
  --route-pmap  also make jax.pmap pmapkit's pmap
  --modern-prng keep today's jax_threefry_partitionable=True (jax.random
                draws as JAX 0.10 makes them, not as classic releases did)
  --report      at exit, list on stderr the classic names the script used
                (uses, file:line of the first use), what served them and
                their modern replacements, within 100 columns
                (also: PMAPKIT_REPORT=1)
  --report=wide the same as one line per name, however wide
  --report=json the same as one JSON object on stderr; --report=PATH.json
                writes it to PATH.json (also: PMAPKIT_REPORT=wide|json|PATH.json)
  -m module     run a module (like python -m) instead of a script
  -h, --help    show this message and exit"""


def program_name():
    """The program as the user typed it: ``pmapkit`` for the console script,
    ``python -m pmapkit`` (with the interpreter's own name) under ``-m``."""
    if os.path.basename(sys.argv[0]) == "__main__.py":
        return f"{os.path.basename(sys.executable) or 'python'} -m pmapkit"
    return SCRIPT_NAME


def main(argv=None, prog=None):
    """Runs one command; returns its exit status. A closed standard output
    ends it quietly with status 1 (Python's own status for a failed flush)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = program_name() if prog is None else prog
    try:
        try:
            status = _dispatch(argv, prog)
        except SystemExit as exc:   # argparse's exits: flushed below, like the rest
            status = exc.code
        except ModuleNotFoundError as exc:
            if exc.name not in NEEDED_DISTRIBUTIONS:
                raise
            print(missing_dependency_line(prog, exc.name), file=sys.stderr)
            status = 1
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_went_away()
    return status


#: The modules pmapkit cannot start without (pyproject's dependencies).
NEEDED_DISTRIBUTIONS = ("jax", "jaxlib", "numpy")


def missing_dependency_line(prog, name):
    """One line for a command that met no ``name`` (jax, jaxlib, numpy) in
    this interpreter's environment: what to install, or which Python has it."""
    return (f"{prog}: {name} is not installed for {sys.executable}; pmapkit needs "
            "jax and jaxlib 0.10 (pip install 'jax>=0.10.2,<0.11'), or run the "
            "pmapkit of the environment that has them.")


def _reader_went_away():
    # The reader closed the pipe (`pmapkit --help | head -1`): what is still
    # buffered can never be written, and the interpreter's last flush would
    # fail again with a traceback. Point stdout at /dev/null instead.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):   # stdout is no file (captured in-process)
        pass
    return 1


def _dispatch(argv, prog):
    command = argv[0] if argv else "demo"
    if command in ("-h", "--help", "help"):
        print(HELP.format(prog=prog))
        return 0
    if command in ("-V", "--version"):
        print(version_line())
        return 0
    if command not in COMMANDS:
        print(f"{prog}: unknown command {command!r}; expected one of "
              f"{', '.join(COMMANDS)} ({prog} --help)", file=sys.stderr)
        return 2
    sub = f"{prog} {command}"
    if command == "launch":   # the children set up their own devices
        from pmapkit.distributed import launch
        return launch.main(argv[1:], prog=sub)
    if command == "run":      # the script sets up its own devices
        return run(argv[1:], sub)
    if command == "migrate":  # source to source; --check runs scripts in children
        from pmapkit.tools.migrate import command as migrate_command
        return migrate_command.main(argv[1:], prog=sub)
    from pmapkit.tools import demo
    if command == "bench":
        from pmapkit.tools.bench import cli as bench_cli
        return bench_cli.main(argv[1:], prog=sub, before_jax=demo.configure_devices)
    return demo.main(argv[1:], prog=sub)


def version_line():
    """``pmapkit X (jax Y, jaxlib Z, Python W)``, read from the installed
    distributions: nothing is imported."""
    from importlib import metadata
    import platform

    def installed(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"
    return (f"pmapkit {installed('pmapkit')} (jax {installed('jax')}, "
            f"jaxlib {installed('jaxlib')}, Python {platform.python_version()})")


def run(argv, prog="pmapkit run"):
    """``pmapkit run``: options end at the program (a script, ``-m module``,
    ``-c code`` or ``-``); everything after it is the program's, as with
    ``python``."""
    route_pmap, report, module, code, rest = False, None, None, None, list(argv)
    classic_prng = True
    while rest and rest[0].startswith("-") and rest[0] != "-":
        option = rest.pop(0)
        if option in ("-h", "--help"):
            print(RUN_USAGE.format(prog=prog))
            return 0
        if option == "--route-pmap":
            route_pmap = True
        elif option == "--modern-prng":
            classic_prng = False
        elif option == "--report":
            report = True
        elif option.startswith("--report="):
            report = option.partition("=")[2]
            if report not in ("json", "wide") and not report.endswith(".json"):
                return _usage_error(prog, "--report= takes wide, json or a path "
                                          "ending in .json")
        elif option in ("-m", "-c"):
            if not rest:
                what = "a module name" if option == "-m" else "the code to run"
                return _usage_error(prog, f"{option} needs {what}")
            if option == "-m":
                module = rest.pop(0)
            else:
                code = rest.pop(0)
            break
        elif option == "--":
            break
        else:
            return _usage_error(prog, f"unknown option {option!r}")
    script = command = None
    if module is None and code is None:
        if not rest:
            return _usage_error(prog, "a program to run is required: a script, a "
                                      "notebook, -m module, -c code, - (stdin) or a command")
        script = rest.pop(0)
        if script != "-" and not os.path.exists(script):
            command = _command_on_path(script)
            if command is None:
                return _usage_error(prog, f"no such script: {script!r} (nor a command "
                                          f"of that name on PATH)")
    from pmapkit.tools import run as run_as_main
    from pmapkit.legacy import activation
    # On for this process when the program imports jax, and for every Python
    # process it starts (workers, a child python, python -m pytest).
    activation.activate(route_pmap=route_pmap, report=report, classic_prng=classic_prng)
    if module is not None:
        run_as_main.run_module(module, rest)
    elif code is not None:
        run_as_main.run_code(code, rest)
    elif script == "-":
        run_as_main.run_stdin(rest)
    elif command is not None and not run_as_main.is_python_script(command):
        # A program of another kind (a shell script, a binary): it runs with
        # the activation in its environment, so the Python processes it
        # starts have the classic layer.
        run_as_main.run_command(command, [script, *rest])
    elif script.endswith(".ipynb"):
        from pmapkit.tools import notebook
        notebook.run_notebook(script, rest)
    else:
        run_as_main.run_script(command or script, rest)
    return 0


def _command_on_path(name):
    """``name`` found on PATH, as ``pmapkit run pytest`` means the console
    script (python itself would not look); None for a path or where none is."""
    if os.sep in name:
        return None
    import shutil
    return shutil.which(name)


def _usage_error(prog, message):
    usage = RUN_USAGE.format(prog=prog).splitlines()[0]
    print(f"{usage}\n{prog}: error: {message}", file=sys.stderr)
    return 2
