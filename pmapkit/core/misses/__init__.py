"""The miss path shared by pmap and pjit (``calls``), ``jax.stages`` objects
(``stages``), committed inputs laid out otherwise (``committed_inputs``), which
shardings are pmap results (``pmap_layouts``)."""
