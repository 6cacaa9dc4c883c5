"""The environment of a Python subprocess a test starts: JAX on 8 CPU
devices, and nothing of the test process's own pmapkit setup (no
PYTHONPATH, no report asked for, no ``pmapkit run`` activation inherited)."""
import os

#: What a test process may carry that its subprocesses must not inherit.
NOT_INHERITED = ("PYTHONPATH", "PMAPKIT_REPORT", "PMAPKIT_RUN")


def subprocess_env(**extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    for name in NOT_INHERITED:
        env.pop(name, None)
    env.update(extra)
    return env


def sigint_as_default():
    """``preexec_fn`` for a child a test interrupts with SIGINT: a shell's
    background job starts with SIGINT ignored, which a child inherits across
    exec (and then Python installs no KeyboardInterrupt handler)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)
