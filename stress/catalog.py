"""Every probe module of the stress pass, and the registry built from them.

A probe module has a ``register(reg)`` that adds its probes to the
``probes.Registry``; listing it in ``PROBE_MODULES`` below is all it takes to
run it (the parent and every worker build the same registry).
"""
from __future__ import annotations

from stress import (bad_colocated, bad_export, bad_host_callback, bad_launch, bad_pjit,
                    bad_pmap, concurrency, donation, fuzz, host_writes, memory, miss_errors,
                    selftest)
from stress.probes import Registry

PROBE_MODULES = (bad_pmap, bad_pjit, bad_host_callback, bad_export, bad_colocated,
                 bad_launch, fuzz, concurrency, host_writes, miss_errors, memory, donation,
                 selftest)


def build_registry(mode):
    """All probes for ``mode`` ("quick" or "full"); the same in the parent
    and every worker."""
    reg = Registry(mode)
    for module in PROBE_MODULES:
        module.register(reg)
    return reg
