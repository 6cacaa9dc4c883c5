"""The compiled hit path: sign a call, find its entry, shard the arguments,
execute (``_dispatch``, ``_shard_arg``: Cython sources in pure-Python mode;
``_compiled`` picks the extension or the pure twin and refuses a stale one).
Imports nothing of JAX nor of the rest of pmapkit."""
