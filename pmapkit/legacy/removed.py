"""The record of a removed JAX name and the errors a refused one raises.

A ``Removed`` record says what JAX release removed a classic name (derived
from the census, ``removal_release``), what serves it under ``pmapkit run``
or, for a refusal, what to use instead; ``Removed.error`` is the
``RemovedFromJax`` error touching a refused name raises. The tables of
records are ``pmapkit.legacy.names``'s.
"""
from __future__ import annotations

import dataclasses

import jax

from pmapkit.legacy import census

__all__ = ["INTERNAL", "RemovedFromJax", "RemovedAttributeError", "RemovedModuleError",
           "Removed", "OVERRIDES", "removal_release"]


#: ``modern`` of a removed JAX internal.
INTERNAL = "JAX internal; no public replacement"


class RemovedFromJax(Exception):
    """Raised where a program touches a name JAX removed that has no faithful
    equivalent on this JAX; the message names the release and the modern API."""


class RemovedAttributeError(RemovedFromJax, AttributeError):
    """A removed function or class (an AttributeError: ``hasattr`` and
    ``getattr(m, name, default)`` still see it missing)."""


class RemovedModuleError(RemovedFromJax, ImportError):
    """A removed module (an ImportError, raised by its import), or a removed
    name in ``from module import name``."""


@dataclasses.dataclass(frozen=True)
class Removed:
    name: str          # the classic public name, e.g. "jax.tree_map"
    modern: str        # what to use on JAX 0.10
    example: str       # one line of the modern spelling
    served_by: str = ""   # what pmapkit installs ("" for a refused name)
    make: object = None   # () -> the installed value (None for a refused name)
    # ``pmapkit migrate`` renames the name to ``modern`` when that is a dotted
    # name on this JAX and: True, a drop-in spelling; None, only if it is the
    # very object ``make`` serves; False, never.
    rename: bool | None = None
    # built on the first read (a module __getattr__), not at install: what it
    # needs may be costly to import or absent (absl-py, optax)
    lazy: bool = False
    # read anew at every access (a module __getattr__, never set on the
    # module): ``make()`` is the reader, for a value classic JAX kept current
    # (jaxlib's table of the backends started so far)
    live: bool = False
    # for a refusal: why no faithful equivalent exists (said in the error)
    why: str = ""

    @property
    def removed_in(self):
        """The JAX release without it: derived from the census
        (``removal_release``), never written here."""
        return removal_release(self.name)

    @property
    def attr(self):
        return self.name.rpartition(".")[2]

    @property
    def owner(self):
        return self.name.rpartition(".")[0]

    def error(self, importing=False):
        """The error to raise; ``importing``: the name is being imported
        (``import owner.name``, or ``from owner import name``, where Python
        would turn an AttributeError into its own generic ImportError):
        an ImportError; read as an attribute, a removed module or name is an
        AttributeError, so ``hasattr`` sees it missing."""
        if self.why:
            text = (f"{self.name} was removed in JAX {self.removed_in} and has no "
                    f"faithful equivalent on JAX {jax.__version__}: {self.why}; so "
                    f"pmapkit.legacy does not provide it: use {self.modern} instead"
                    + (f", e.g. {self.example}" if self.example else ""))
        elif self.modern == INTERNAL:
            text = (f"{self.name} was removed in JAX {self.removed_in}. {INTERNAL} "
                    f"on JAX {jax.__version__}, so pmapkit.legacy does not provide it.")
        else:
            text = (f"{self.name} was removed in JAX {self.removed_in} and has no "
                    f"faithful equivalent on JAX {jax.__version__}, so pmapkit.legacy "
                    f"does not provide it: use {self.modern} instead, e.g. {self.example}")
        if importing:
            return RemovedModuleError(text, name=self.name)
        return RemovedAttributeError(text)


# Where the census's fact is not the one a record states, the record's own
# release with the reason (tests/test_legacy_census.py holds each against the
# census: a name the census never saw, or a fact about another thing).
OVERRIDES = {
    "jax.pmap": ("0.10.0 (the C++ pmap)",
                 "jax.pmap still exists; 0.10 removed the C++ pmap it was"),
    "jax.experimental.pjit.pjit": ("0.4.14 (in_axis_resources)",
                                   "the name stays; its in_axis_resources went"),
    "jax.Array.device_buffers": ("0.4.27", "a property, not a module name"),
    "jax.Array.device_buffer": ("0.4.27", "a property, not a module name"),
    "jax.Array.local_shards": ("0.4.7", "GlobalDeviceArray's property; jax.Array took "
                               "the GDA's place"),
    "jax.sharding.PmapSharding.devices": ("0.10.0", "a property of a removed class"),
    # what real code reached (issue 48), removals the release notes date
    "jax.Array.to_py": ("0.4.9", "DeviceArray's method, kept on jax.Array until then"),
    "jax.Array.sharding_spec": ("0.4.14", "ShardedDeviceArray's property"),
    "jax.Array.device": ("0.4.31", "a method until then; a property since"),
    "jax.config.enable_omnistaging": ("0.3.15", "a method of the config object"),
    "jax.config.omnistaging_enabled": ("0.3.15", "an attribute of the config object"),
    "jax.device_put_replicated": ("0.10.0", "probed: deprecated names answered until 0.10"),
    "jax.device_put_sharded": ("0.10.0", "probed: deprecated names answered until 0.10"),
    # modules JAX 0.10 still answers for (an empty or deprecated module)
    "jax.experimental.export": ("0.4.36", "0.10 keeps the package; its functions went"),
    "jax.experimental.export.call_exported": ("0.4.36", "as the module above"),
    "jax.experimental.export.serialize": ("0.4.36", "as the module above"),
    "jax.experimental.export.export": ("0.4.36", "as the module above"),
    "jax.experimental.jax2tf.jax_export": ("0.4.22", "jax2tf needs TensorFlow: not probed"),
    "jax.experimental.jax2tf.jax_export.serialize": ("0.4.22", "as the module above"),
}
# facts read from the sources of the releases between the collected ones
# (issue 56: jax sdists 0.2.0-0.4.12) or a module's own names' window
OVERRIDES.update({
    "jax.experimental.array_api": ("0.5.0..0.6.2", "a module with no pair of its own: "
                                   "the census window of its names"),
    "jax.experimental.array_api.fft": ("0.5.0..0.6.2", "as the module above"),
    "jax.experimental.array_api.linalg": ("0.5.0..0.6.2", "as the module above"),
    "jax._src.util.prod": ("0.4.5", "the sdists: in jax/_src/util.py to 0.4.4"),
    "jax._src.numpy.lax_numpy.ndarray": ("0.4.5", "the sdists: imported to 0.4.4"),
    "jax._src.lax.control_flow.allowed_effects": ("0.4.13..0.4.30", "probed: 0.4.13 "
                                                  "has it, 0.4.30 does not"),
    "jax._src.effects.EffectTypeSet.add": ("0.4.5", "the sdists: a set to 0.4.4"),
    "jax._src.lax.control_flow.for_loop": ("0.7.0..0.9.2", "the installed releases: "
                                           "0.6.2 has the module, 0.9.2 not"),
    "jax._src.lax.control_flow.for_loop.for_loop": ("0.7.0..0.9.2", "as the module above"),
    "jax.Array.local_data": ("0.4.7", "GlobalDeviceArray's method, as local_shards"),
    "jax.Array._device": ("0.4.14", "DeviceArray's attribute; jax.Array took its place"),
    "jax.interpreters.pxla.axis_index": ("0.1.77 at the latest", "not in the sources of "
                                         "0.1.77, the oldest release the census reads"),
    "jax.ad.primitive_jvps": ("0.4.14..0.4.30", "probed: jax.ad, jax.interpreters.ad as an "
                              "attribute, answers in 0.4.13, not in 0.4.30"),
    "jax.ad.primitive_transposes": ("0.4.14..0.4.30", "as jax.ad.primitive_jvps"),
})

# The release notes name the very release inside a census window (releases
# between the read or installable ones): each must lie in its window.
_NARROWED = {
    "jax.tree_multimap": "0.3.16", "jax.tree_util.tree_multimap": "0.3.16",
    "jax.ops.index": "0.3.2", "jax.ops.index_update": "0.3.2", "jax.ops.index_add": "0.3.2",
    "jax.ops.index_mul": "0.3.2", "jax.ops.index_min": "0.3.2", "jax.ops.index_max": "0.3.2",
    "jax.numpy.DeviceArray": "0.4.14",
    "jax.interpreters.xla.DeviceArray": "0.4.11",
    "jax.interpreters.pxla.ShardedDeviceArray": "0.4.14",
    "jax.profiler.TraceContext": "0.3.15", "jax.profiler.StepTraceContext": "0.3.15",
    "jax.profiler.trace_function": "0.3.15", "jax.experimental.optimizers": "0.3.16",
    "jax.experimental.stax": "0.3.16", "jax.api": "0.2.21", "jax.soft_pmap": "0.3.18",
    "jax.custom_transforms": "0.2.12",
    "jax.interpreters.pxla.make_sharded_device_array": "0.4.14",
    "jax.experimental.global_device_array": "0.4.7", "jax.experimental.loops": "0.3.16",
    "jax.experimental.optix": "0.2.7", "jax.experimental.sharded_jit": "0.3.16",
    "jax.experimental.maps": "0.4.31", "jax.experimental.host_callback": "0.8.0",
}
OVERRIDES.update((n, (r, "the release notes narrow the census window"))
                 for n, r in _NARROWED.items())



def removal_release(name):
    """The release that removed ``name``: ``OVERRIDES``, else the census,
    else (a module: its sources in ``census_data/modules.txt`` tell, as
    ``jax.config`` the module went in 0.4.29 while ``jax.config`` the
    attribute stays) the module's; ``census.TARGET_RELEASE`` for a name the
    census has no removal for (JAX 0.10 lists it, but not as the classic
    one was)."""
    override = OVERRIDES.get(name)
    if override is not None:
        return override[0]
    found = census.removed_in(name)
    if found is None or found.startswith("after"):
        found = census.module_removed_in(name) or found
    if found is None and name in census.real_use_missing():
        # real code reached it; no release census lists it: gone by this JAX
        return f"{census.TARGET_RELEASE} at the latest"
    return found or census.TARGET_RELEASE
