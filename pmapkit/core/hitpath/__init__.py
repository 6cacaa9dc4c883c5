"""The compiled hit path: sign a call, find its entry, shard the arguments,
execute. Cython sources in pure-Python mode, one idea a module: ``_keys``
(the key format), ``_feed`` (feeding a call; ``FastpathData``, the miss
path's contract), ``_lru`` (the shared LRU), ``_express`` (the express
call), ``_miss`` (miss, compile, retry), ``_dispatch`` (the call),
``_shard_arg`` (host values); ``_compiled`` picks the extensions or the pure
twins and refuses a stale one. Imports nothing of JAX nor of the rest of
pmapkit."""
