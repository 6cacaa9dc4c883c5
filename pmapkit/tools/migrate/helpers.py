"""The helpers ``pmapkit migrate`` may write into a migrated file, where one
expression cannot say what the classic API did (plain JAX 0.10 only: the
migrated file must run without pmapkit).

Each is a real function of ``written`` (tested there as code); a ``Helper``
names it, the modules its source refers to, and the helpers it calls. Its
source is the function's own, read once when this module is imported (a run
that later cannot read the installed package still writes what was tested).
It is written once per file, after the imports, only when a rewrite in that
file uses it; a file that defines the name already keeps its own. A helper
whose body is one statement (``inline``) is written as that statement, as an
engineer would write it, not as a def and its call.
"""
from __future__ import annotations

import dataclasses
import inspect
import textwrap

from pmapkit.tools.migrate import written


@dataclasses.dataclass(frozen=True)
class Helper:
    function: object
    imports: tuple = ("jax",)     # top-level modules the source refers to
    needs: tuple = ()             # other helpers it calls
    call_after: bool = False      # a call of it follows its definition
    inline: bool = False          # its body is written, not a def (one statement needs no name)
    source: str = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        source = textwrap.dedent(inspect.getsource(self.function))
        if self.inline:
            source = textwrap.dedent(source.split("\n", 1)[1])
        object.__setattr__(self, "source", source)

    @property
    def name(self):
        return self.function.__name__


CLASSIC_PRNG = Helper(written._classic_prng, inline=True)
PER_DEVICE = Helper(written._per_device, ("jax", "functools"))
FIRST_DEVICES = Helper(written._first_devices, ("jax", "functools", "numpy"))
DEVICE_INDEX = Helper(written._device_index, ("jax", "numpy"))
ID_TAP = Helper(written._id_tap, ("jax", "jax.experimental", "logging", "numpy", "threading"),
                (DEVICE_INDEX,))
ID_PRINT = Helper(written._id_print, needs=(ID_TAP,))
HOST_CALL = Helper(written._host_call, ("jax", "jax.experimental", "numpy", "threading"),
                   (DEVICE_INDEX,))
DEVICE_BUFFERS = Helper(written._device_buffers)
DEVICE_PUT_REPLICATED = Helper(written._device_put_replicated, ("jax", "numpy"))
DEVICE_PUT_SHARDED = Helper(written._device_put_sharded, ("jax", "numpy"))
PJIT = Helper(written._pjit, ("jax", "functools", "inspect"))
WITH_SHARDING_CONSTRAINT = Helper(written._with_sharding_constraint)
RESOURCE_MESH = Helper(written._resource_mesh, ("threading",))
PJIT_RESOURCE_MESH = Helper(written._pjit_resource_mesh, ("jax", "functools"),
                            (RESOURCE_MESH,))

ALL = {h.name: h for h in (CLASSIC_PRNG, PER_DEVICE, FIRST_DEVICES, DEVICE_INDEX, ID_TAP,
                           ID_PRINT, HOST_CALL, DEVICE_BUFFERS, DEVICE_PUT_REPLICATED,
                           DEVICE_PUT_SHARDED, PJIT, WITH_SHARDING_CONSTRAINT,
                           RESOURCE_MESH, PJIT_RESOURCE_MESH)}

#: Every function the helpers define at the top of a file (a migrated file's own
#: copies are not migrated again).
DEFINED = frozenset(ALL)
