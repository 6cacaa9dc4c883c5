"""Builds pmapkit's Cython extensions (metadata lives in pyproject.toml).

The hot-path modules are written in Cython's pure-Python mode: each ``.py``
source (typed by the ``.pxd`` beside it) compiles to an extension of the same
name, and the ``.py`` is installed too as the pure-Python fallback. Each
extension carries the hash of the sources it was built from
(``PMAPKIT_SOURCE_HASH``), so a stale one is refused at import
(``pmapkit.core.hitpath._compiled``). In a checkout: ``pip install -e '.[dev]'``,
then ``python setup.py build_ext --inplace`` after editing them.
"""
import importlib.util
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HITPATH = os.path.join("pmapkit", "core", "hitpath")


def _load_source_hash():
    # By path: pmapkit itself need not import (nor be built) yet.
    spec = importlib.util.spec_from_file_location(
        "_pmapkit_source_hash", os.path.join(HITPATH, "_source_hash.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_hashes = _load_source_hash()
#: Each after the modules it cimports (``_source_hash.MODULES``).
COMPILED_MODULES = list(_hashes.MODULES)

extensions = [
    Extension(f"pmapkit.core.hitpath.{name}", [f"pmapkit/core/hitpath/{name}.py"],
              # _feed copies host arrays with numpy's C API (its .pxd).
              include_dirs=[numpy.get_include()],
              define_macros=[("PMAPKIT_SOURCE_HASH",
                              '"%s"' % _hashes.source_hash(HITPATH, name))])
    for name in COMPILED_MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "embedsignature": True,
        },
    ),
)
