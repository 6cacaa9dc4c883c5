from typing import Any, Callable

from pmapkit.core.hitpath._express import ExpressCall
from pmapkit.core.hitpath._feed import LeafTypes
from pmapkit.core.hitpath._lru import SharedCaches
from pmapkit.core.hitpath._miss import MissPath

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

PICKLE_VERSION: int
MAX_SIGNATURES: int

def arm_special_checks(flags: tuple[Any, Any] | None) -> None: ...

class DispatchFunction(MissPath):
    fun: Callable[..., Any]
    _static_argnums: tuple[int, ...]
    _static_names: frozenset[str]
    _sign_shardings: bool
    _on_clear: Callable[[], None] | None
    _express: ExpressCall | None
    def __init__(
        self,
        fun: Callable[..., Any],
        cache_miss: Callable[..., tuple[Any, Any]],
        static_argnums: tuple[int, ...],
        types: LeafTypes,
        canonical_dtypes: Any,
        flatten: Callable[[Any], tuple[list[Any], Any]],
        trace_context: Callable[[], tuple[Any, ...]],
        probe: tuple[Any, ...],
        lower: Callable[..., Any],
        reduce_fn: Callable[[], tuple[Any, ...]],
        static_argnames: Any = ...,
        sign_shardings: bool = ...,
        cache_size: int | None = ...,
        describe: Callable[..., str] | None = ...,
        context_state: Any = ...,
        shared: SharedCaches | None = ...,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: Any, objtype: Any) -> Any: ...
    @property
    def _cache_size(self) -> int: ...
    def _debug_cache_keys(self) -> str: ...
    def _debug_compute_cache_key(self, *args: Any, **kwargs: Any) -> Any: ...
    def _debug_decode_key(self, key: tuple[Any, ...]) -> dict[str, Any]: ...
    def _debug_dispatch_stats(self) -> dict[str, int]: ...
    def _set_cache_size(self, size: int) -> None: ...
    def clear_cache(self) -> None: ...
    def lower(self, *args: Any, **kwargs: Any) -> Any: ...
