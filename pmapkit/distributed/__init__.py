"""Multi-process runs: joining one (``pmapkit.distributed.initialize()``,
here) and what runs in them::

    launch          ``pmapkit launch``: N local processes of one script
    process_local   a process's local view of a program spanning processes
                    (``SpanningProgram``) and back, without copies
    pjit_across     pjit's positional semantics on a mesh over processes

``initialize``:

Under ``pmapkit launch`` the launcher's environment variables give the
coordinator, the process count and this process's rank::

    PMAPKIT_COORDINATOR_ADDRESS  -> coordinator_address  (127.0.0.1:PORT)
    PMAPKIT_NUM_PROCESSES        -> num_processes
    PMAPKIT_PROCESS_ID           -> process_id
    PMAPKIT_LOCAL_DEVICE_COUNT   -> (informational: the launcher already set
                                    XLA_FLAGS/JAX_NUM_CPU_DEVICES to it)

Anywhere else it defers to ``jax.distributed.initialize``, whose own cluster
detection (SLURM, Open MPI, Kubernetes, TPU pods, ...) fills in what is not
given, so one script runs unchanged under the launcher and on a cluster.
Arguments passed explicitly always win over the environment.
"""
from __future__ import annotations

import os
import sys

# jax loads on first use, not here: ``pmapkit launch`` (this package's
# ``launch``) starts processes and needs no jax, nor does its --help.
from pmapkit.distributed.launch import ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID

__all__ = ["initialize", "is_initialized", "launched", "shutdown"]


def launched() -> bool:
    """True in a process started by ``pmapkit launch``."""
    return ENV_COORDINATOR in os.environ


def _env_int(name):
    text = os.environ[name]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, "
                         f"got {text!r}") from None


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               local_device_ids=None, **kwargs):
    """Joins this process to the run (``jax.distributed.initialize``).

    Keyword arguments beyond the first four go to
    ``jax.distributed.initialize`` as they are (``initialization_timeout``,
    ``cluster_detection_method``, ...).
    """
    if launched():
        if coordinator_address is None:
            coordinator_address = os.environ[ENV_COORDINATOR]
        if num_processes is None:
            num_processes = _env_int(ENV_NUM_PROCESSES)
        if process_id is None:
            process_id = _env_int(ENV_PROCESS_ID)
    import jax
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id,
                               local_device_ids=local_device_ids, **kwargs)
    if launched():
        _exit_at_once_on_uncaught_exceptions()


def _exit_at_once_on_uncaught_exceptions():
    """Under the launcher, an uncaught exception ends this process right after
    its traceback is printed. A normal exit would run JAX's shutdown, which
    waits at a barrier for the other processes — which may be waiting for this
    one in a collective — so the failure would only surface at the timeout."""
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            previous(exc_type, exc, tb)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    sys.excepthook = excepthook


def __getattr__(name):
    # ``is_initialized`` and ``shutdown`` are jax.distributed's own functions.
    if name in ("is_initialized", "shutdown"):
        import jax
        value = getattr(jax.distributed, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"is_initialized", "shutdown"})
