"""The ``pmapkit`` command (also ``python -m pmapkit``).

    pmapkit demo                  data-parallel training demo (the default)
    pmapkit bench [options]       dispatch and feature benchmarks vs JAX
                                  (``pmapkit bench --help``)
    pmapkit launch -n N [--devices-per-process K] [--timeout S] script.py [args]
                                  N local processes joined by jax.distributed
                                  (``pmapkit launch --help``)
    pmapkit run [--route-pmap] [--modern-prng] [--report[=json|PATH.json]] script.py [args]
    pmapkit run [--route-pmap] [--modern-prng] [--report[=json|PATH.json]] -m module [args]
                                  an old script, unedited: pmapkit stands in for
                                  what this JAX removed (``pmapkit run --help``)
    pmapkit migrate PATH... [-o OUT | --in-place] [--diff] [--strict] [--check]
                                  rewrite classic code to plain modern JAX
                                  (``pmapkit migrate --help``)
"""
import os
import sys

COMMANDS = ("demo", "bench", "launch", "run", "migrate")

RUN_USAGE = """\
usage: pmapkit run [--route-pmap] [--modern-prng] [--report] script.py [args ...]
       pmapkit run [--route-pmap] [--modern-prng] [--report] -m module [args ...]

Runs an old JAX script unedited, as `python script.py` / `python -m module`
would (sys.argv, __main__, exit status), after pmapkit.legacy.install():
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
                their modern replacements (also: PMAPKIT_REPORT=1)
  --report=json the same as one JSON object on stderr; --report=PATH.json
                writes it to PATH.json (also: PMAPKIT_REPORT=json|PATH.json)
  -m module     run a module (like python -m) instead of a script
  -h, --help    show this message"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv else "demo"
    if command in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    if command not in COMMANDS:
        print(f"pmapkit: unknown command {command!r}; expected one of "
              f"{', '.join(COMMANDS)} (pmapkit --help)", file=sys.stderr)
        return 2
    if command == "launch":   # the children set up their own devices
        from pmapkit.distributed import launch
        return launch.main(argv[1:])
    if command == "run":      # the script sets up its own devices
        return run(argv[1:])
    if command == "migrate":  # source to source; --check runs scripts in children
        from pmapkit.tools.migrate import command as migrate_command
        return migrate_command.main(argv[1:])
    from pmapkit.tools import demo
    demo.configure_devices()
    if command == "bench":
        from pmapkit.tools.bench import cli as bench_cli
        return bench_cli.main(argv[1:])
    return demo.demo()


def run(argv):
    """``pmapkit run``: options end at the script or ``-m module``; everything
    after it is the script's, as with ``python``."""
    route_pmap, report, module, rest = False, None, None, list(argv)
    classic_prng = True
    while rest and rest[0].startswith("-") and module is None:
        option = rest.pop(0)
        if option in ("-h", "--help"):
            print(RUN_USAGE)
            return 0
        if option == "--route-pmap":
            route_pmap = True
        elif option == "--modern-prng":
            classic_prng = False
        elif option == "--report":
            report = True
        elif option.startswith("--report="):
            report = option.partition("=")[2]
            if report != "json" and not report.endswith(".json"):
                return _usage_error("--report= takes json or a path ending in .json")
        elif option == "-m":
            if not rest:
                return _usage_error("-m needs a module name")
            module = rest.pop(0)
        elif option == "--":
            break
        else:
            return _usage_error(f"unknown option {option!r}")
    if module is None:
        if not rest:
            return _usage_error("a script to run is required (or -m module)")
        script = rest.pop(0)
        if not os.path.isfile(script):
            return _usage_error(f"no such script: {script!r}")
    from pmapkit.tools import run as _as_main
    from pmapkit import legacy
    legacy.install(route_pmap=route_pmap, report=report, classic_prng=classic_prng)
    if module is not None:
        _as_main.run_module(module, rest)
    else:
        _as_main.run_script(script, rest)
    return 0


def _usage_error(message):
    print(f"{RUN_USAGE.splitlines()[0]}\npmapkit run: error: {message}", file=sys.stderr)
    return 2
