"""Ahead of time: the ``jax.stages`` objects of pmapkit's programs
(``stages``: ``lower()``, ``compile()``, a compiled call)."""
