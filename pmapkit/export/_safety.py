"""Safety checks an export may turn off: ``DisabledSafetyCheck`` of every
vintage, and the classic ``strict_checks`` flag in those terms."""
from __future__ import annotations

import warnings
from collections.abc import Iterable

from jax import export as jax_export

_SHAPE_ASSERTIONS = "shape_assertions"


class DisabledSafetyCheck(jax_export.DisabledSafetyCheck):
    """jax.export's ``DisabledSafetyCheck`` (``platform()``,
    ``custom_call(target)``; equal to jax's own), plus the 0.4.2x
    ``shape_assertions()``: shape constraints are checked when the artifact is
    called, so, as in jax's last releases that had it, it has no effect."""

    @classmethod
    def shape_assertions(cls) -> DisabledSafetyCheck:
        warnings.warn("DisabledSafetyCheck.shape_assertions has no effect: the "
                      "shapes of a call are checked against the export when it "
                      "is called.", DeprecationWarning, stacklevel=2)
        return cls(_SHAPE_ASSERTIONS)


PLATFORM_CHECK = DisabledSafetyCheck.platform()
ALL_CUSTOM_CALLS = DisabledSafetyCheck.custom_call("ALL")
#: What the classic ``strict_checks=False`` turned off.
RELAXED_CHECKS = (PLATFORM_CHECK, ALL_CUSTOM_CALLS)


def checks_to_disable(disabled_checks) -> tuple:
    """``disabled_checks`` as jax.export takes them (no-op ones dropped)."""
    if isinstance(disabled_checks, (str, bytes)) or not isinstance(disabled_checks, Iterable):
        raise TypeError("export: 'disabled_checks' must be a sequence of "
                        "export.DisabledSafetyCheck, got "
                        f"{type(disabled_checks).__name__}.")
    checks = tuple(disabled_checks)
    for check in checks:
        if not isinstance(check, jax_export.DisabledSafetyCheck):
            raise TypeError("export: 'disabled_checks' must hold "
                            "export.DisabledSafetyCheck values (platform(), "
                            f"custom_call(target)), got {check!r}.")
    return tuple(c for c in checks if str(c) != _SHAPE_ASSERTIONS)
