"""The classic ``jax.pmap`` (internals in ``_pmap``) and the classic
placement helpers that put stacked per-device values as a pmap takes them
(``placement``: ``device_put_replicated``, ``device_put_sharded``)."""
from pmapkit.pmap._pmap import pmap

__all__ = ["pmap"]

# Where classic code (and pickle) finds it: the package, not its internals.
pmap.__module__ = __name__
