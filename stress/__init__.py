"""pmapkit's stress pass: the probes and the machinery of ``python -m stress``.

Bottom to top (no module imports one above it):

- ``probes``: what a probe is, the verdicts a body may raise, the registry.
- ``common``: what probe bodies share (jax, pmapkit, inputs, checks).
- ``bad_pmap``, ``bad_pjit``, ``bad_host_callback``, ``bad_export``,
  ``bad_colocated``, ``bad_launch``: the bad-input tables, one per subsystem.
- ``artifacts``: the export artifacts ``bad_export`` and ``fuzz`` start from.
- ``fuzz``: corrupted and crafted export artifacts.
- ``concurrency``, ``memory``, ``donation``: the long-run sections.
- ``catalog``: every probe module (``PROBE_MODULES``) and ``build_registry``;
  a new probe module is one with a ``register(reg)``, listed there.
- ``runner``: the worker subprocesses that run probes (a crash or hang is
  seen and classified, never kills the harness), the classification of
  outcomes.
- ``report``: the tables and the JSON.
"""
