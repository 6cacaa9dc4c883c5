"""Transformation rules of pmapkit's primitives, registered on import.

One module per transformation: jvp, batching (vmap), checkify, partial evaluation
(linearize / grad), transpose, dead-code elimination, checkpoint, and the
typecheck rules of ``jax_enable_checks``.
"""
from pmapkit.rules import (  # noqa: F401
    batching, checkify, dce, jvp, partial_eval, remat, transpose, typecheck)
