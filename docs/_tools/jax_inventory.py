"""Writes docs/_inventories/jax.inv: a Sphinx inventory of JAX's public API.

The site links ``jax.jit``, ``jax.shard_map``, ... into JAX's own API
reference through intersphinx. The builds here (and CI) reach no network but
the package index, so the inventory is made from the installed jax and kept
in the repository; regenerate it when the jax pin moves:

    python docs/_tools/jax_inventory.py            # writes docs/_inventories/jax.inv
    python docs/_tools/jax_inventory.py --check    # exit 1 if the shipped one differs

Where each name lives on https://docs.jax.dev/en/latest/ follows how JAX's
docs are laid out: most names have a page of their own,
``_autosummary/jax.jit.html``; the classes of ``jax.sharding`` and
``jax.stages`` (and a few others, listed in ``ON_MODULE_PAGE``) are described
on their module's page, ``jax.sharding.html#jax.sharding.Mesh``.
"""
import argparse
import importlib
import inspect
import os
import sys
import types
import zlib

BASE_URL = "https://docs.jax.dev/en/latest/"
HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, os.pardir, "_inventories", "jax.inv")

# The modules JAX's API reference documents, each with a page of its own
# (``jax.numpy.html``); their public names are read from the installed jax.
MODULES = (
    "jax", "jax.numpy", "jax.numpy.fft", "jax.numpy.linalg", "jax.lax", "jax.random",
    "jax.sharding", "jax.stages", "jax.export", "jax.tree", "jax.tree_util", "jax.debug",
    "jax.distributed", "jax.dlpack", "jax.dtypes", "jax.ffi", "jax.nn", "jax.nn.initializers",
    "jax.ops", "jax.profiler", "jax.image", "jax.flatten_util", "jax.ad_checkpoint",
    "jax.typing", "jax.experimental", "jax.experimental.mesh_utils",
    "jax.experimental.multihost_utils", "jax.experimental.checkify", "jax.extend",
    "jax.extend.core", "jax.extend.backend", "jax.extend.random", "jax.scipy.special",
    "jax.scipy.linalg",
)
# Modules JAX documents as sections of a parent's page, not pages of their own.
SECTION_OF = {"jax.numpy.fft": "jax.numpy", "jax.numpy.linalg": "jax.numpy",
              "jax.scipy.special": "jax.scipy", "jax.scipy.linalg": "jax.scipy"}
# Names described on their module's page rather than on one of their own:
# a module name means all of its names, "classes" every class of it.
ON_MODULE_PAGE = {
    "jax.sharding": "all",
    "jax.stages": "all",
    "jax.lax": "classes",
    "jax.export": {"Exported", "DisabledSafetyCheck", "minimum_supported_serialization_version",
                   "maximum_supported_serialization_version"},
    "jax.image": {"ResizeMethod"},
}


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    found = {}
    for name in sorted(set(names)):
        try:
            value = getattr(module, name)
        except AttributeError:        # a name JAX deprecated away behind __getattr__
            continue
        if isinstance(value, types.ModuleType):
            continue                  # submodules are listed as modules of their own
        found[name] = value
    return found


def _role(value):
    if inspect.isclass(value):
        return "py:class"
    if callable(value):
        return "py:function"
    return "py:data"


def _on_module_page(module_name, name, value):
    rule = ON_MODULE_PAGE.get(module_name)
    if rule == "all":
        return True
    if rule == "classes":
        return inspect.isclass(value)
    return bool(rule) and name in rule


def entries():
    """(name, role, uri) for every module and public name of ``MODULES``."""
    rows = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        page = SECTION_OF.get(module_name, module_name) + ".html"
        rows.append((module_name, "py:module", f"{page}#module-{module_name}"))
        for name, value in _public_names(module).items():
            full = f"{module_name}.{name}"
            if _on_module_page(module_name, name, value):
                uri = f"{page}#{full}"
            else:
                uri = f"_autosummary/{full}.html#{full}"
            rows.append((full, _role(value), uri))
    return rows


def inventory_bytes(version):
    """The inventory in Sphinx's format (version 2: a header, then zlib)."""
    header = ("# Sphinx inventory version 2\n"
              "# Project: JAX\n"
              f"# Version: {version}\n"
              "# The remainder of this file is compressed using zlib.\n").encode()
    lines = []
    for name, role, uri in sorted(set(entries())):
        # "$" in a URI stands for the name, "-" for a display name equal to it.
        if uri.endswith("#" + name):
            uri = uri[:-len(name)] + "$"
        lines.append(f"{name} {role} 1 {uri} -\n")
    return header + zlib.compress("".join(lines).encode(), 9)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the shipped inventory instead of writing it")
    parser.add_argument("-o", "--output", default=OUTPUT)
    args = parser.parse_args(argv)
    import jax
    data = inventory_bytes(jax.__version__)
    if args.check:
        with open(args.output, "rb") as f:
            same = f.read() == data
        print(f"{args.output}: {'up to date' if same else 'differs from the installed jax'}")
        return 0 if same else 1
    with open(args.output, "wb") as f:
        f.write(data)
    print(f"{args.output}: {len(entries())} names of jax {jax.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
