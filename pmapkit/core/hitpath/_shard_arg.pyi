from typing import Any, Callable, Sequence

#: The sources' hash a compiled build carries (None: the pure build).
BUILT_FROM: str | None

class HostSpec:
    aval: Any
    dtype: Any
    indices: tuple[Any, ...]
    devices: list[Any]
    sharding: Any
    device_put: Callable[..., Any]
    read_during_call: Any
    whole: bool
    copy_first: bool
    aliases: bool
    def __init__(self, aval: Any, dtype: Any, indices: Sequence[Any],
                 devices: Sequence[Any], sharding: Any,
                 device_put: Callable[..., Any], read_during_call: Any,
                 aliases: bool = ...) -> None: ...
    def put(self, x: Any) -> Any: ...
    def put_own(self, x: Any) -> Any: ...
