"""From a traced body to a program and its layouts: the lowering rules of
pmapkit's primitives (``lowering``), the manual regions they open
(``manual_regions``), where the pmaps nested in a pmap body sit and map
their axes (``nested_pmaps``), the kind of program each primitive makes and
its shardings (``kinds``), which shardings are pmap results
(``pmap_layouts``)."""
