"""pmapkit's caches, bounded and emptied together: ``clear_caches``,
``set_cache_size``, ``cache_sizes`` (defined in the core's keys room)."""
from pmapkit.core.keys import caches as _caches
from pmapkit.core.keys.caches import cache_sizes, clear_caches, set_cache_size

__all__ = ["cache_sizes", "clear_caches", "set_cache_size"]
__doc__ = _caches.__doc__
