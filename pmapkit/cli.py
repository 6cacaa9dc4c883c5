"""The ``pmapkit`` command (also ``python -m pmapkit``).

    pmapkit demo                  data-parallel training demo (the default)
    pmapkit bench [options]       dispatch and feature benchmarks vs JAX
                                  (``pmapkit bench --help``)
    pmapkit launch -n N [--devices-per-process K] [--timeout S] script.py [args]
                                  N local processes joined by jax.distributed
                                  (``pmapkit launch --help``)
"""
import sys

COMMANDS = ("demo", "bench", "launch")


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
        from pmapkit import launch
        return launch.main(argv[1:])
    from pmapkit import demo
    demo.configure_devices()
    if command == "bench":
        from pmapkit import _bench_cli
        return _bench_cli.main(argv[1:])
    return demo.demo()
