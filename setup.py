"""Builds pmapkit's Cython extensions (metadata lives in pyproject.toml).

The hot-path modules are written in Cython's pure-Python mode: each ``.py``
source (typed by the ``.pxd`` beside it) compiles to an extension of the same
name, and the ``.py`` is installed too as the pure-Python fallback.
"""
from Cython.Build import cythonize
from setuptools import Extension, setup

COMPILED_MODULES = ["_dispatch", "_shard_arg"]

extensions = [
    Extension(f"pmapkit.core.{name}", [f"pmapkit/core/{name}.py"])
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
