"""Module paths of an earlier release that moved: each old path stays
importable, warns once (a ``DeprecationWarning`` naming the new path, as JAX
does when it moves a module) and is the very module at its new home, so
``from old.path import Name`` gives the same objects."""
import importlib
import sys
import warnings

#: old module path -> its home now.
MOVED = {
    "pmapkit.maps": "pmapkit.pjit.maps",
    "pmapkit.placement": "pmapkit.pmap.placement",
    "pmapkit.legacy.migrate": "pmapkit.tools.migrate",
}


def alias(old):
    """Make the module being imported as ``old`` the module at its new home."""
    new = MOVED[old]
    # stacklevel 3: the frame that imported the old path (through importlib's).
    warnings.warn(f"{old} is deprecated: it moved to {new}; import {new} instead.",
                  DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)
    # The import system returns what sys.modules holds once the old module
    # has run: the new home itself, not a copy.
    sys.modules[old] = module
    return module
