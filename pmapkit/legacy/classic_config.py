"""What classic programs read from JAX's config object that JAX 0.10's lacks:
``jax.config.FLAGS`` (a namespace over the config values), the omnistaging
switches of JAX 0.2, and the options removed since (``census_data``'s
``config.txt``) that real code still names.

Each builder returns the value ``pmapkit.legacy.install`` sets on the config
object (only where it lacks the attribute); nothing here is installed by
importing it.
"""
from __future__ import annotations

import warnings

import jax

__all__ = ["ConfigNamespace", "flags", "enable_omnistaging", "omnistaging_enabled",
           "classic_update_value"]

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
