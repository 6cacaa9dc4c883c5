"""What ``pmapkit migrate`` did to one file: each rewrite (line, old → new),
each place left as written and why, each pmap kept as ``jax.pmap`` and why."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Rewrite:
    line: int
    family: str     # "trees/ops", "placement", "pjit", "host_callback", "export", "pmap"
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class Left:
    line: int
    name: str       # the classic name left as written
    why: str        # why, and what to do (also the comment written above the line)


@dataclasses.dataclass
class FileReport:
    path: str
    rewrites: list = dataclasses.field(default_factory=list)
    left: list = dataclasses.field(default_factory=list)
    kept: list = dataclasses.field(default_factory=list)    # Left records: pmaps kept
    helpers: list = dataclasses.field(default_factory=list)  # helper names written in

    @property
    def changed(self):
        return bool(self.rewrites or self.helpers)

    def counts(self):
        return (f"{len(self.rewrites)} rewritten, {len(self.left)} left, "
                f"{len(self.kept)} pmap kept")

    def format(self):
        lines = [f"{self.path}: {self.counts()}"]
        for r in sorted(self.rewrites, key=lambda r: r.line):
            lines.append(f"  {r.line:>5}  {r.family:<13} {r.old}  ->  {r.new}")
        if self.helpers:
            lines.append(f"         helpers written into the file: {', '.join(self.helpers)}")
        for k in sorted(self.kept, key=lambda r: r.line):
            lines.append(f"  {k.line:>5}  kept jax.pmap  {k.why}")
        for k in sorted(self.left, key=lambda r: r.line):
            lines.append(f"  {k.line:>5}  LEFT          {k.name}: {k.why}")
        return "\n".join(lines)
