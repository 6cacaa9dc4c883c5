"""The one line saying the pure-Python build runs unasked, with advice that
works where the reader is: the compiled pmapkit they installed, shadowed by
a checkout's ``pmapkit/`` on ``sys.path`` (run with ``python -P`` or from
another folder); a checkout whose interpreter has Cython (rebuild in place);
one without (``pip install -e``, whose ``dev`` extra brings Cython). Standard
library only, and only read when the line is written (never on a compiled
import)."""
import importlib.machinery
import importlib.util
import json
import os
from urllib.parse import unquote, urlparse

from pmapkit.core.hitpath import _source_hash

#: From a checkout root, in an environment without Cython: builds the
#: extensions in place (the ``dev`` extra brings Cython and setuptools).
EDITABLE_INSTALL = 'pip install -e ".[test,dev]"'


def compiled_in(package_dir):
    """Whether the pmapkit package at ``package_dir`` holds both compiled
    hot-path modules."""
    folder = os.path.join(package_dir, "core", "hitpath")
    return all(any(os.path.exists(os.path.join(folder, name + suffix))
                   for suffix in importlib.machinery.EXTENSION_SUFFIXES)
               for name in ("_dispatch", "_shard_arg"))


def installed_package_dir():
    """The package folder of the pmapkit an installer recorded (an editable
    install's source, or site-packages'), else None."""
    from importlib import metadata
    for dist in metadata.distributions(name="pmapkit"):
        if dist.read_text("RECORD") is None:
            continue   # a build leftover (pmapkit.egg-info), not an install
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        url = direct.get("url", "")
        if direct.get("dir_info", {}).get("editable") and url.startswith("file://"):
            return os.path.join(unquote(urlparse(url).path), "pmapkit")
        return str(dist.locate_file("pmapkit"))
    return None


def advice(package_dir, installed_dir, cython_available):
    """What to do, for the pure build run from ``package_dir``."""
    here = os.path.realpath(package_dir)
    if installed_dir and os.path.realpath(installed_dir) != here and compiled_in(installed_dir):
        return (f"a compiled pmapkit is installed ({installed_dir}) but the pmapkit/ "
                f"in {os.path.dirname(here)} comes first on sys.path: run from another "
                "folder, or with `python -P`")
    root = os.path.dirname(here)
    if not os.path.exists(os.path.join(root, "setup.py")):
        return "reinstall pmapkit from a wheel (pip install --force-reinstall pmapkit)"
    if cython_available:
        return f"build it in {root}: `{_source_hash.REBUILD_COMMAND}`"
    return f"build it in {root}: `{EDITABLE_INSTALL}` (this environment has no Cython)"


def line(package_dir):
    """The notice, one line ending in a newline."""
    what = advice(package_dir, installed_package_dir(),
                  importlib.util.find_spec("Cython") is not None)
    return (f"pmapkit: pure-Python build, slower calls (no compiled core in "
            f"{os.path.join(package_dir, 'core', 'hitpath')}); {what}; "
            "PMAPKIT_PUREPYTHON=1 runs it without this line\n")
