"""What a family of rules declares, and the two ways a rule declines."""
from __future__ import annotations

import dataclasses


class LeaveAsIs(Exception):
    """A rule cannot rewrite this use safely: the code stays as written, with
    a ``# pmapkit migrate:`` comment saying ``why`` (and what to do)."""

    def __init__(self, why):
        super().__init__(why)
        self.why = why


class KeepPmap(Exception):
    """A ``jax.pmap`` that stays ``jax.pmap`` (valid on JAX 0.10), and why."""

    def __init__(self, why):
        super().__init__(why)
        self.why = why


@dataclasses.dataclass(frozen=True)
class Family:
    """One family's rules, keyed by qualified classic names.

    ``moves``: a name whose modern spelling is another name of the same
    object or a drop-in one (imports are rewritten, ``A.x`` references
    replaced; a moved module moves its members too). ``names``: a reference
    replaced by an expression. ``calls``: ``rule(ctx, original, updated) ->
    new expression text`` for a call of the name. ``attributes``: the same
    for ``<any>.attr`` (the classic array properties). ``classic``: names
    (and their members) that must not remain: a use no rule rewrote is left
    with a comment, ``why`` from ``reasons`` or the census. ``plan``: below."""
    name: str
    moves: dict = dataclasses.field(default_factory=dict)
    names: dict = dataclasses.field(default_factory=dict)
    calls: dict = dataclasses.field(default_factory=dict)
    attributes: dict = dataclasses.field(default_factory=dict)
    classic: tuple = ()
    reasons: dict = dataclasses.field(default_factory=dict)
    #: ``plan(ctx, module)``: the family's plan of a file, made before any rewrite
    #: (its hooks, ``decorator``, ``reference``, ``leave_call``, ``leave_function``,
    #: ``leave_statement``, each optional, are called by the driver); None: no plan.
    plan: object = None
