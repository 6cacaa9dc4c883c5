from typing import Any, Callable

from pmapkit.core.hitpath._lru import SharedCaches

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

class MissPath:
    _cache_miss: Callable[..., tuple[Any, Any]]
    _shared: SharedCaches
    _sign_global: bool
    _cache_size_limit: int
    _misses: int
    _evictions: int
