"""Transformation rules of pmapkit's primitives, registered on import.

One module per transformation: jvp, batching (vmap), checkify, partial evaluation
(linearize / grad), transpose, dead-code elimination, checkpoint, and the
typecheck rules of ``jax_enable_checks``.
"""
import importlib

from pmapkit import _jax_private as jp
from pmapkit.core.rules import (  # noqa: F401
    batching, dce, jvp, partial_eval, remat, transpose, typecheck)

# checkify's rules are registered when a program imports checkify (before
# any checkify trace can start): importing it costs start-up time.
jp.when_imported(jp.CHECKIFY_MODULE,
                 lambda: importlib.import_module("pmapkit.core.rules.checkify"))
