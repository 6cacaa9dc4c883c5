"""Miss, compile, retry: what a call does when its signature has no ready
entry (``MissPath``, the base of ``DispatchFunction``).

The thread that put a fresh entry in the cache runs the miss
(``cache_miss``: trace, compile, run) and fills the entry from its
``FastpathData`` (``_fill``); calls of the signature arriving meanwhile
wait on the entry. A failed compile marks the entry with the error's text
only: each later call runs its own miss (``_retry_failed``), never another
call's error. Calls the hit path does not take (traces, unhashable statics,
checks on) run Python (``_python_call``).

Compiled by Cython (typed by ``_miss.pxd``) and runnable as plain Python,
like every module of the hit path (``_compiled``).
"""
from pmapkit.core.hitpath._feed import ArgumentAliasError, CacheEntry, FastpathData
from pmapkit.core.hitpath._lru import SharedCaches, replace, settle


class MissPath:
    """The miss side of a ``DispatchFunction``: its ``cache_miss``, the
    ``LeafTypes``, the shared caches, and the counters of slow calls.
    Its fields are set by ``DispatchFunction.__init__``."""

    def _python_call(self, args, kwargs):
        self._misses += 1
        return self._cache_miss(*args, **kwargs)[0]

    def _compile_entry(self, entry, args, kwargs, cache, key, leaves):
        # Only the thread that inserted the entry gets here; others wait.
        self._misses += 1
        drop = False
        try:
            result = self._cache_miss(*args, **kwargs)
            drop = not self._fill(entry, result[1], leaves)
        except ArgumentAliasError:
            # About this call's values only: waiters take Python with their
            # own arguments, and the next call of the signature compiles.
            entry.fallback = True
            drop = True
            raise
        except BaseException as exc:
            # Waiters and later calls of the signature run their own miss
            # (``_retry_failed``); only the text is kept (for
            # ``_debug_cache_keys``), not the exception and the frames, with
            # this call's arguments, its traceback holds.
            entry.fallback = True
            entry.failure = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._finish(entry, cache, key, drop)
        return result[0]

    def _fill(self, entry, fastpath, leaves):
        """``entry`` made from a miss's fast-path data (None: the signature
        runs on the Python path); False when the entry must not be kept."""
        if fastpath is None:
            entry.fallback = True
            return True
        if not isinstance(fastpath, FastpathData):
            raise RuntimeError(
                f"pmapkit internal error: the miss path handed {type(fastpath).__name__}, "
                "not FastpathData, to the dispatch core.")
        data = fastpath
        if data.signs_global and not self._sign_global and self._has_global(leaves):
            # Global arrays must sign apart from local ones of their shape,
            # and this key was made without telling them apart: sign them
            # apart from now on and key this call anew. (A key of local
            # arrays only stays valid: they sign the same.)
            self._set_sign_global()
            entry.fallback = True
            return False
        if data.signs_global:
            self._set_sign_global()
        entry.populate(data, self._types)
        return True

    def _finish(self, entry, cache, key, drop):
        """Mark ``entry`` ready (waking its waiters); drop it from ``cache``
        or keep the cache within its bound."""
        entry.ready = True
        entry.event.set()
        self._evictions += settle(self._shared, cache, key, entry, not drop,
                                  self._cache_size_limit)

    def _retry_failed(self, failed, args, kwargs, cache, key, leaves):
        """A call whose entry's compile failed (for another call's arguments,
        or this signature's: its own miss tells) runs its own miss, never
        the failed call's error. The first such call puts a fresh entry in
        place of the failed one and compiles it (calls arriving meanwhile
        wait on it, as on any miss: one compile, not one per thread); any
        other (the entry already replaced or cleared) takes Python with its
        own arguments, never waiting on another failure."""
        fresh = CacheEntry()
        if replace(self._shared, cache, key, failed, fresh):
            return self._compile_entry(fresh, args, kwargs, cache, key, leaves)
        return self._python_call(args, kwargs)

    def _set_sign_global(self):
        # Keys of every sharer must tell global arrays apart from now on.
        shared = self._shared
        shared.sign_global = True
        for member in list(shared.members):
            member._sign_global = True

    def _has_global(self, leaves):
        array_type = self._types.array_type
        key_type = self._types.key_type
        for x in leaves:
            if type(x) is key_type:
                x = x._base_array
            if type(x) is array_type and not x.is_fully_addressable:
                return True
        return False


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
def _is_compiled():
    return type(_is_compiled).__name__ != "function"


_COMPILED = _is_compiled()

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
