from typing import Any

from pmapkit.core.hitpath._feed import CacheEntry

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

DEFAULT_CACHE_SIZE: int

class SharedCaches:
    caches: dict[Any, dict[Any, CacheEntry]]
    sig_ids: dict[Any, int]
    aval_ids: dict[Any, int]
    placed_ids: dict[Any, dict[int, int]]
    next_id: Any
    lock: Any
    sign_global: bool
    clock: int
    members: Any
    current: tuple[Any, Any, dict[Any, CacheEntry]]
    def __init__(self) -> None: ...

def insert(shared: SharedCaches, cache: dict[Any, CacheEntry], key: Any,
           fresh: CacheEntry) -> CacheEntry: ...
def touch(shared: SharedCaches, entry: CacheEntry) -> None: ...
def settle(shared: SharedCaches, cache: dict[Any, CacheEntry], key: Any, entry: CacheEntry,
           keep: bool, limit: int) -> int: ...
def replace(shared: SharedCaches, cache: dict[Any, CacheEntry], key: Any,
            failed: CacheEntry, fresh: CacheEntry) -> bool: ...
def evict(shared: SharedCaches, cache: dict[Any, CacheEntry], limit: int) -> int: ...
def evict_all(shared: SharedCaches, limit: int) -> int: ...
def clear(shared: SharedCaches) -> None: ...
