"""Keys and caches: every cache key built (``_cache_keys``), the bounds and
the clearing of every cache (``caches``), what wrappers of one function share
(``wrapper_cache``)."""
