from typing import Any, Callable

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

FASTPATH_VERSION: int
PICKLE_VERSION: int
KWARGS_MARK: str
KEY_VERSION: int
MAX_EQUIVALENTS: int
DEFAULT_CACHE_SIZE: int
MAX_SIGNATURES: int
MAX_EXPRESS_BUILDS: int
DONATION_LOCK: Any

class ArgumentAliasError(ValueError): ...
class KeyFormatError(ValueError): ...

def new_express_epoch() -> None: ...

def static_entry(where: Any, value: Any) -> tuple[Any, type, Any]: ...
def decode_key(key: tuple[Any, ...], has_static_argnums: bool) -> dict[str, Any]: ...

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
    failure: str | None
    event: Any
    executable: Any
    execute: Callable[..., Any] | None
    unflatten: Callable[..., Any] | None
    single_out: bool
    kept: Any
    in_shardings: tuple[Any, ...] | None
    host_specs: tuple[Any, ...] | None
    out_handlers: list[Any] | None
    out_treedef: Any
    shard_fallback: Any
    host_call: Any
    host_refusal: Any
    mover: Any
    is_equivalent: Any
    equivalents: list[tuple[Any, ...]] | None
    differents: list[Any] | None
    types: LeafTypes | None
    donated: tuple[int, ...] | None
    resharded: int
    n_inputs: int
    held_scalars: list[Any] | None
    host_waits: tuple[int, ...] | None
    make_express: Callable[..., Any] | None
    express: Callable[..., Any] | None
    express_epoch: int
    express_builds: int
    key: Any
    def __init__(self) -> None: ...
    def populate(self, fastpath: Any, types: LeafTypes) -> None: ...
    def run(self, leaves: Any) -> Any: ...
    def shard(self, leaves: Any) -> Any: ...
    def aliases_donated(self, leaves: Any) -> bool: ...

def find_donated_alias(leaves: Any, donated: tuple[int, ...], leaf_types: LeafTypes,
                       in_place: Callable[[Any, int], bool] | None) -> tuple[int, int] | None: ...
def execute_donating(entry: CacheEntry, leaves: Any) -> Any: ...
def arm_special_checks(flags: tuple[Any, Any] | None) -> None: ...

class SharedCaches:
    caches: dict[Any, dict[Any, CacheEntry]]
    sig_ids: dict[Any, int]
    aval_ids: dict[Any, int]
    placed_ids: dict[Any, dict[int, int]]
    next_id: Any
    lock: Any
    sign_global: bool
    newest: CacheEntry | None
    members: Any
    current: tuple[Any, Any, dict[Any, CacheEntry]]
    def __init__(self) -> None: ...

class DispatchFunction:
    fun: Callable[..., Any]
    _cache_miss: Callable[..., tuple[Any, Any]]
    _static_argnums: tuple[int, ...]
    _static_names: frozenset[str]
    _sign_shardings: bool
    _sign_global: bool
    _cache_size_limit: int
    _misses: int
    _evictions: int
    _on_clear: Callable[[], None] | None
    _shared: SharedCaches
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
