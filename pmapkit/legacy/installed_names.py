"""What ``install()`` returns: the names it installed, a tuple (callers
count, iterate, compare and add to it), whose repr is one short line, as
the interpreter echoes it at the prompt (the whole list is thousands of
names: ``list(...)`` shows it, ``pmapkit run --report`` says what each is)."""


class InstalledNames(tuple):
    """The classic names one ``install()`` call put in place, in order."""

    __slots__ = ()

    def __repr__(self):
        if not self:
            return "InstalledNames(): nothing new installed"
        shown = ", ".join(self[:2])
        more = f", ... {len(self) - 2:,} more" if len(self) > 2 else ""
        return f"InstalledNames({len(self):,} names: {shown}{more}; list(...) shows all)"

    __str__ = __repr__
