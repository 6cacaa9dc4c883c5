"""What a probe is, what it may raise, and the registry that holds them.

The bottom of the stress pass: the probe modules (``bad_*``, ``fuzz``,
``concurrency``, ...), ``common``, ``catalog``, ``runner`` and ``report`` all
build on it; it imports none of them.

A probe's outcome is one of ``OUTCOMES`` (see ``runner`` for how each is
decided); a probe body states one itself by raising a ``Verdict``
(``Wrong``, ``Unclear``, ``Crash``, ``Hang``, ``Leak``) or returning a
``Result`` with details for the report.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

OUTCOMES = ("clean", "unclear", "wrong", "crash", "hang", "leak")

DEFAULT_TIMEOUT_S = 60.0


# -- what a probe body may raise to state its outcome -----------------------------
class Verdict(Exception):
    outcome = "unclear"


class Wrong(Verdict):
    """Silent garbage: a result that differs from the reference, or a bad
    input accepted without a word."""
    outcome = "wrong"


class Unclear(Verdict):
    outcome = "unclear"


class Crash(Verdict):
    """A process the probe started (a launcher, its ranks) crashed."""
    outcome = "crash"


class Hang(Verdict):
    """A process the probe started did not finish in time."""
    outcome = "hang"


class Leak(Verdict):
    outcome = "leak"


class Result:
    """A probe body's successful return with details for the report."""

    def __init__(self, note="ok", **details):
        self.note = note
        self.details = details


# -- probes and their registry ------------------------------------------------------
@dataclasses.dataclass
class Probe:
    name: str                 # unique: "<group>/<what>"
    section: str              # bad_inputs | fuzz | concurrency | memory | donation
    group: str                # the subsystem or kind, a row of the tables
    body: Callable
    expect: tuple = (TypeError, ValueError)
    names: tuple = ()         # the message must contain one of these (any case)
    match: str | None = None  # ... and this regular expression
    ref: Callable | None = None   # what a normal return must equal
    timeout: float = DEFAULT_TIMEOUT_S
    isolated: bool = False
    reference: bool = False   # a row about JAX itself, not counted for pmapkit


class Registry:
    """Every probe of a run, by name, in order."""

    def __init__(self, mode):
        self.mode = mode
        self.probes: dict[str, Probe] = {}

    def add(self, section, group, what, body, **options):
        name = f"{group}/{what}"
        if name in self.probes:
            raise ValueError(f"duplicate probe name {name!r}")
        expect = options.pop("expect", (TypeError, ValueError))
        if isinstance(expect, type):
            expect = (expect,)
        names = options.pop("names", ())
        if isinstance(names, str):
            names = (names,)
        self.probes[name] = Probe(name, section, group, body, expect=tuple(expect),
                                  names=tuple(names), **options)

    def section(self, section, group, **defaults):
        """``add`` with the section, group and default options filled in."""
        def add(what, body, **options):
            self.add(section, group, what, body, **{**defaults, **options})
        return add

    def __getitem__(self, name):
        return self.probes[name]

    def in_section(self, section):
        return [p for p in self.probes.values() if p.section == section]
