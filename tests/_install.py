"""Which pmapkit build the tests import, and whether it is the installed one."""
import importlib.metadata
import json
import os

import pmapkit

# The source tree the install was built from: the tests' parent directory, or
# PMAPKIT_CHECKOUT when the tests run from a copy outside the checkout.
REPO = os.environ.get("PMAPKIT_CHECKOUT") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
CHECKOUT_PACKAGE = os.path.join(REPO, "pmapkit")


def package_dir():
    return os.path.dirname(os.path.realpath(pmapkit.__file__))


def installed_distribution():
    """pmapkit's distribution as an installer recorded it, else None.

    Only a ``.dist-info`` with a RECORD counts: ``pip install .`` leaves a
    ``pmapkit.egg-info`` in the checkout, and with the checkout on ``sys.path``
    that build leftover would otherwise be taken for the install.
    """
    for dist in importlib.metadata.distributions(name="pmapkit"):
        if dist.read_text("RECORD") is not None:
            return dist
    return None


def editable_source():
    """The source directory of an editable install of pmapkit, else None."""
    dist = installed_distribution()
    if dist is None:
        return None
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    info = json.loads(text)
    if not info.get("dir_info", {}).get("editable"):
        return None
    url = info.get("url", "")
    return os.path.realpath(url[len("file://"):]) if url.startswith("file://") else None


def installed_package_dir():
    """Where the installed distribution puts ``pmapkit/`` (None if not installed)."""
    dist = installed_distribution()
    if dist is None:
        return None
    return os.path.realpath(os.path.dirname(dist.locate_file("pmapkit/__init__.py")))


def shadowing_problem():
    """Why the imported pmapkit is not the installed build, or None."""
    here = package_dir()
    editable = editable_source()
    if editable is not None and here == os.path.join(editable, "pmapkit"):
        return None   # `pip install -e .`: the checkout *is* the install
    installed = installed_package_dir()
    if installed is None:
        return ("pmapkit is not installed in this environment "
                f"(imported from {here}); install it first: pip install '.[test]'")
    if here != installed:
        return (f"the tests imported pmapkit from {here}, not the installed build "
                f"at {installed} (the checkout shadows the install); run the "
                "tests as `python -P -m pytest tests` or from another directory")
    return None
