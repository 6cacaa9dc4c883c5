"""The docstrings the API reference renders (docs/reference/: the modules of
``pmapkit._PUBLIC_MODULES``, their members and the members' attributes) are
reST whose inline literals end where they are meant to.

reST ends an inline literal only at a ````` `` ````` followed by a space or
punctuation: in ````` ``jax.Array``s sharded ... ``out_axes`` `````, the
literal runs on to the next ````` `` `````, swallowing the prose between as
code, without a warning (so the strict site build passes). The built site is
checked for the same in tests/test_docs_site.py; this check needs no Sphinx.
"""
import importlib
import inspect
import types

import pmapkit


def misplaced_literal_ends(text):
    """Where ``text`` has an inline literal that does not end (or start) as
    written: an end-string followed by a letter or digit, a start-string
    after one, or a start-string never closed."""
    found = []
    pieces = text.split("``")
    for k in range(1, len(pieces), 2):           # pieces[k] is a literal's text
        before, inside = pieces[k - 1], pieces[k]
        after = pieces[k + 1] if k + 1 < len(pieces) else None
        shown = f"``{inside}``"
        if after is None:
            found.append(f"never closed: ``{inside[:40]}")
        elif after[:1].isalnum():
            found.append(f"{shown}{after[:1]}: a letter right after the end")
        elif before[-1:].isalnum():
            found.append(f"{before[-1:]}{shown}: a letter right before the start")
    return found


def _rendered_docstrings():
    """(where, docstring) for each docstring the reference pages show."""
    for name in pmapkit._PUBLIC_MODULES:
        module = importlib.import_module(name)
        yield name, module.__doc__ or ""
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n, v in vars(module).items() if not n.startswith("_")
                     and getattr(v, "__module__", None) == name]
        for member_name in names:
            member = getattr(module, member_name)
            if isinstance(member, types.ModuleType):
                continue
            if not getattr(member, "__module__", "").startswith("pmapkit"):
                continue   # JAX's own names re-exported: JAX's docstrings
            yield f"{name}.{member_name}", inspect.getdoc(member) or ""
            if inspect.isclass(member):
                for attribute, value in vars(member).items():
                    if not attribute.startswith("_") and getattr(value, "__doc__", None):
                        yield f"{name}.{member_name}.{attribute}", inspect.getdoc(value)


def test_the_checker_finds_a_literal_that_runs_on():
    assert misplaced_literal_ends("are ``jax.Array``s sharded; ``x`` is") == [
        "``jax.Array``s: a letter right after the end"]
    assert misplaced_literal_ends("``a``/``b`` (``c``), ``d``: e.") == []
    assert misplaced_literal_ends("rank-``ndim`` and x``y``") == [
        "x``y``: a letter right before the start"]
    assert misplaced_literal_ends("``open") == ["never closed: ``open"]


def test_reference_docstrings_end_their_literals():
    seen, broken = 0, []
    for where, doc in _rendered_docstrings():
        seen += 1
        broken += [f"{where}: {problem}" for problem in misplaced_literal_ends(doc)]
    assert seen > 100, seen
    assert not broken, "\n".join(broken)
