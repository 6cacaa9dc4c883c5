from typing import Any, Callable

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

FASTPATH_VERSION: int
MAX_EQUIVALENTS: int
DONATION_LOCK: Any

class ArgumentAliasError(ValueError): ...

class FastpathData:
    version: int | None
    program: Any
    n_inputs: int
    executable: Any
    kept: tuple[int, ...] | None
    in_shardings: Any
    host_specs: Any
    out_handlers: Any
    out_treedef: Any
    shard_fallback: Callable[[Any, int], Any] | None
    is_equivalent: Callable[[Any, int], bool] | None
    mover: Any
    signs_global: bool
    donated: Any
    host_call: Callable[..., Any] | None
    host_refusal: str | None
    make_express: Callable[..., Any] | None
    def __init__(self) -> None: ...

class LeafTypes:
    array_type: type
    ndarray_type: type
    host_scalar_type: type
    asarray: Callable[..., Any]
    sharding_attr: str
    raise_deleted: Callable[[Any], None]
    key_type: type | None
    aval_of: Callable[[Any], Any]
    sharding_of: Callable[[Any], Any]
    committed_of: Callable[[Any], bool]
    is_deleted_of: Callable[[Any], bool]
    def __init__(self, array_type: type, ndarray_type: type, host_scalar_type: type,
                 asarray: Callable[..., Any], sharding_attr: str,
                 raise_deleted: Callable[[Any], None],
                 key_type: type | None = ...,
                 readers: tuple[Callable[[Any], Any], ...] | None = ...) -> None: ...

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
    last_equal: list[Any] | None
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
    last_use: int
    def __init__(self) -> None: ...
    def populate(self, fastpath: FastpathData, types: LeafTypes) -> None: ...
    def run(self, leaves: Any) -> Any: ...
    def shard(self, leaves: Any) -> Any: ...
    def aliases_donated(self, leaves: Any) -> bool: ...

def find_donated_alias(leaves: Any, donated: tuple[int, ...], leaf_types: LeafTypes,
                       in_place: Callable[[Any, int], bool] | None) -> tuple[int, int] | None: ...
def execute_donating(entry: CacheEntry, leaves: Any) -> Any: ...
def host_copy(x: Any) -> Any: ...
def same_host_signature(x: Any, dtype: Any, shape: tuple[int, ...]) -> bool: ...
