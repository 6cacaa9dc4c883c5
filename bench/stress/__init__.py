"""pmapkit's stress pass: the probes and the machinery of ``bench/stress_pass.py``.

- ``runner``: probes, their registry, the worker subprocesses that run them
  (a crash or hang is seen and classified, never kills the harness), the
  classification of outcomes.
- ``common``: what probe bodies share (jax, pmapkit, inputs, checks).
- ``bad_pmap``, ``bad_pjit``, ``bad_host_callback``, ``bad_export``,
  ``bad_colocated``, ``bad_launch``: the bad-input tables, one per subsystem.
- ``fuzz``: corrupted and crafted export artifacts.
- ``concurrency``, ``memory``, ``donation``: the long-run sections.
- ``report``: the tables and the JSON.
"""
