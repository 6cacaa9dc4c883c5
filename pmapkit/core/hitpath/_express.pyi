from typing import Any

from pmapkit.core.hitpath._feed import CacheEntry
from pmapkit.core.hitpath._lru import SharedCaches

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

MAX_EXPRESS_BUILDS: int
NOT_EXPRESS: Any

def new_express_epoch() -> None: ...
def express_epoch() -> int: ...
def express_arguments(args: tuple[Any, ...], leaf_types: Any) -> bool: ...
def prime(entry: CacheEntry, args: tuple[Any, ...], epoch: int) -> list[Any] | None: ...

class ExpressCall:
    entry: CacheEntry
    live: bool
    def __init__(self, entry: CacheEntry, args: tuple[Any, ...],
                 cache: dict[Any, CacheEntry], shared: SharedCaches) -> None: ...
    def run(self, args: tuple[Any, ...]) -> Any: ...
