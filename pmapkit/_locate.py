"""Finds pmapkit's compiled build when Python imported the bare source tree.

``python -m pmapkit`` or ``python -m pytest`` run from a checkout put the
checkout first on ``sys.path``, so ``import pmapkit`` finds the sources, which
hold no compiled extensions after a plain ``pip install .``. Then the
installed copy (which has them) is put first on the package's ``__path__``, so
every submodule, compiled or not, comes from that one build.
"""
import os
import sys

_EXTENSION_SUFFIXES = (".so", ".pyd")


def _has_extensions(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    return any(n.startswith("_dispatch.") and n.endswith(_EXTENSION_SUFFIXES) for n in names)


def installed_build_dir(package_dir):
    """The directory of an installed pmapkit with extensions, if the package
    was imported from a tree without them; otherwise None."""
    if _has_extensions(package_dir):
        return None
    here = os.path.realpath(package_dir)
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "pmapkit")
        if (os.path.realpath(candidate) != here
                and os.path.isfile(os.path.join(candidate, "__init__.py"))
                and _has_extensions(candidate)):
            return candidate
    return None
