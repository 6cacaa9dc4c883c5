"""Programs: lowering pmapkit's primitives (``lowering``), the kind of
program each makes (``kinds``), compiling them (``compiling``), one compiled
program and its fast-path data (``compiled_program``), moving inputs laid out
otherwise (``moves``), the collectives in flight (``inflight``), NaN/inf
checks (``special_values``), manual regions, programs spanning processes
(``process_local``)."""
