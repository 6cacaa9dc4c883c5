from typing import Any

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

KEY_VERSION: int
KWARGS_MARK: str
LIST_MARK: int
TUPLE_MARK: int

class KeyFormatError(ValueError): ...

def static_entry(where: Any, value: Any) -> tuple[Any, type, Any]: ...
def decode_key(key: tuple[Any, ...], has_static_argnums: bool) -> dict[str, Any]: ...
def same_context(cached: Any, ctx: Any) -> bool: ...
