"""The core shared by every system: the compiled dispatch (``_dispatch``,
``_shard_arg``, picked by ``_compiled``), cache keys and bounds, spec
parsing, pmapkit's primitives and their rules (``rules/``), lowering and
compiling, the miss path (``calls``), input moves and ``jax.stages``
objects. Internal: the systems (``pmapkit.pmap``, ``pmapkit.pjit``, ...)
build on it; it imports none of them."""
import importlib as _importlib


def __getattr__(name):
    # ``pmapkit.core.lowering`` read as an attribute loads the module, as
    # ``pmapkit.host_callback`` does on the package.
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
