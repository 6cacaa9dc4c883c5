"""The miss path shared by pmap and pjit (``calls``), and the refusal of a
committed input laid out otherwise than a ``Sharding`` given for it
(``committed_inputs``)."""
