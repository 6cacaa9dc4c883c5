from typing import Any, Callable

FASTPATH_VERSION: int
PICKLE_VERSION: int
KWARGS_MARK: str

class ArgumentAliasError(ValueError): ...

class LeafTypes:
    array_type: type
    ndarray_type: type
    host_scalar_type: type
    asarray: Callable[..., Any]
    sharding_attr: str
    raise_deleted: Callable[[Any], None]
    key_type: type | None
    def __init__(self, array_type: type, ndarray_type: type, host_scalar_type: type,
                 asarray: Callable[..., Any], sharding_attr: str,
                 raise_deleted: Callable[[Any], None],
                 key_type: type | None = ...) -> None: ...

class CacheEntry:
    ready: bool
    fallback: bool
    error: BaseException | None
    fastpath: Any
    def __init__(self) -> None: ...
    def populate(self, fastpath: Any, types: LeafTypes) -> None: ...
    def shard(self, leaves: Any) -> list[Any]: ...
    def aliases_donated(self, leaves: Any) -> bool: ...

class DispatchFunction:
    fun: Callable[..., Any]
    _cache_miss: Callable[..., tuple[Any, Any]]
    _static_argnums: tuple[int, ...]
    _always_fallback: bool
    _on_clear: Callable[[], None] | None
    def __init__(
        self,
        fun: Callable[..., Any],
        cache_miss: Callable[..., tuple[Any, Any]],
        static_argnums: tuple[int, ...],
        types: LeafTypes,
        canonical_dtypes: Any,
        flatten: Callable[[Any], tuple[list[Any], Any]],
        trace_context: Callable[[], tuple[Any, ...]],
        probe: tuple[Any, Any, Any, Any],
        lower: Callable[..., Any],
        reduce_fn: Callable[[], tuple[Any, ...]],
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: Any, objtype: Any) -> Any: ...
    @property
    def _cache_size(self) -> int: ...
    def _debug_cache_keys(self) -> str: ...
    def _debug_compute_cache_key(self, *args: Any, **kwargs: Any) -> Any: ...
    def clear_cache(self) -> None: ...
    def lower(self, *args: Any, **kwargs: Any) -> Any: ...
