"""Compiled programs and running them: compiling (``compiling``), one
compiled program and its fast-path data (``compiled_program``), moving
inputs laid out otherwise (``moves``), the collectives in flight
(``inflight``), NaN/inf checks and de-optimized re-runs
(``special_values``), programs spanning processes (``process_local``)."""
