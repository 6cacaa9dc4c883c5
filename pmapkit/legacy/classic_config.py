"""What classic programs read from JAX's config object that JAX 0.10's lacks:
``jax.config.FLAGS`` (a namespace over the config values), the omnistaging
switches of JAX 0.2, and the options removed since (``census_data``'s
``config.txt``) that real code still names.

Each builder returns the value ``pmapkit.legacy.install`` sets on the config
object (only where it lacks the attribute); nothing here is installed by
importing it.
"""
from __future__ import annotations

import dataclasses
import warnings

import jax

from pmapkit.legacy import census
from pmapkit.legacy.removed import RemovedFromJax

__all__ = ["ConfigNamespace", "flags", "enable_omnistaging", "omnistaging_enabled",
           "classic_update_value", "ConfigOption", "CONFIG_OPTIONS", "RemovedConfigValueError",
           "removed_config_text"]

#: options classic ``jax.config.update`` took a ``lax.Precision`` member for.
PRECISION_OPTIONS = ("jax_default_matmul_precision",)


def classic_update_value(name, value):
    """The value JAX 0.10's ``jax.config.update(name, ...)`` takes for the one a
    classic program passes: classic config stored a ``lax.Precision`` member
    for the matmul precision unchecked (dot_general read it back as a
    Precision); JAX 0.10 takes its name only."""
    if name in PRECISION_OPTIONS and isinstance(value, jax.lax.Precision):
        return value.name.lower()
    return value


class ConfigNamespace:
    """Classic ``jax.config.FLAGS``: reading ``FLAGS.jax_x`` reads the config
    value ``jax_x``; setting it updates the config (``jax.config.update``)."""

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return jax.config.read(name)
        except (AttributeError, KeyError):
            pass
        try:
            return getattr(jax.config, name)     # options served as attributes
        except AttributeError:
            raise AttributeError(f"Unrecognized config option: {name}") from None

    def __setattr__(self, name, value):
        jax.config.update(name, value)

    def __repr__(self):
        return "jax.config.FLAGS (a namespace over the config values)"


def flags():
    return ConfigNamespace()


_OMNISTAGING = ("omnistaging is always on since JAX 0.2.12; see "
                "https://github.com/google/jax/blob/main/design_notes/omnistaging.md")


def enable_omnistaging():
    def enable_omnistaging():
        """Classic ``jax.config.enable_omnistaging()``: a no-op that warns."""
        warnings.warn(f"enable_omnistaging() is a no-op: {_OMNISTAGING}", stacklevel=2)
    return enable_omnistaging


def omnistaging_enabled():
    return True


@dataclasses.dataclass(frozen=True)
class ConfigOption:
    """A ``jax_*`` config option JAX removed whose every accepted value asks
    for what JAX 0.10 always does: served as an option of JAX's config that
    changes nothing; a value that asks for the removed behaviour raises."""
    name: str
    default: bool
    accepted: tuple      # the values that describe JAX 0.10's behaviour
    why: str             # why those values change nothing today

    @property
    def removed_in(self):
        return census.config_removed_in(self.name) or census.TARGET_RELEASE

    def check(self, value):
        if bool(value) not in self.accepted:
            raise RemovedConfigValueError(
                f"{self.name}={bool(value)} was removed in JAX {self.removed_in}: "
                f"{self.why}; pmapkit.legacy accepts only "
                f"{' or '.join(map(str, self.accepted))}. Use the default instead, "
                f"e.g. drop the jax.config.update('{self.name}', ...) line")


class RemovedConfigValueError(RemovedFromJax, ValueError):
    """A removed config option set to the behaviour JAX no longer has."""


CONFIG_OPTIONS = (
    ConfigOption("jax_parallel_functions_output_gda", False, (True, False),
                 "pjit's outputs were GlobalDeviceArrays (True) or ShardedDeviceArrays; "
                 "every output is now a jax.Array, which serves both APIs"),
    ConfigOption("jax_array", True, (True,),
                 "every value is a jax.Array; DeviceArray/ShardedDeviceArray/GDA are gone"),
    ConfigOption("jax_jit_pjit_api_merge", True, (True,),
                 "jax.jit and pjit are one API"),
    ConfigOption("jax_omnistaging", True, (True,),
                 "JAX stages every operation under jit"),
    ConfigOption("jax_enable_mlir", True, (True,), "JAX lowers through MLIR only"),
    ConfigOption("jax_coordination_service", True, (True,),
                 "the coordination service is the only one jax.distributed has"),
    ConfigOption("jax_dynamic_shapes", False, (False,),
                 "JAX traces static shapes only: the dynamic-shapes prototype is gone"),
    ConfigOption("experimental_xmap_spmd_lowering", False, (False,),
                 "xmap is gone, and with it its SPMD lowering"),
)


def removed_config_text(option):
    """The error for ``jax.config.update(option, ...)`` of a removed option
    pmapkit.legacy does not serve, or None for one the census never saw."""
    removed = census.config_removed_in(option)
    if removed is None:
        return None
    return (f"{option} was removed in JAX {removed} and has no faithful equivalent on "
            f"JAX {jax.__version__}, so pmapkit.legacy does not provide it: use "
            f"nothing instead (drop the jax.config.update('{option}', ...) line)")
