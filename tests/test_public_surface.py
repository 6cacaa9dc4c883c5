"""The public surface is an explicit list (``pmapkit._PUBLIC_MODULES``):
the API reference and the user documentation name only modules on it, and
every module on it exists. Every other module is internal, whatever its name
(ARCHITECTURE.md, "Public surface")."""
import importlib
import pathlib
import re

import pmapkit

import _install  # tests/_install.py: the checkout (PMAPKIT_CHECKOUT outside it)

# The checkout's README and docs/: beside the tests, or where PMAPKIT_CHECKOUT
# says when the tests run from a copy (as CI runs them against the wheel).
ROOT = pathlib.Path(_install.REPO)
PUBLIC = pmapkit._PUBLIC_MODULES
_MODULE_PATH = re.compile(r"\bpmapkit(?:\.[A-Za-z_]\w*)+")


def _public_prefix(path):
    """The longest public module ``path`` is in or names a member of."""
    parts = path.split(".")
    for n in range(len(parts), 1, -1):
        if ".".join(parts[:n]) in PUBLIC:
            return ".".join(parts[:n])
    # The package itself: only the names of its ``__all__``.
    if len(parts) == 1 or parts[1] in pmapkit.__all__:
        return "pmapkit"
    return None


def test_internal_modules_are_not_public():
    for path in ("pmapkit.core.lowering.lowering", "pmapkit.core.misses.calls", "pmapkit.core.programs.moves",
                 "pmapkit.core.keys._cache_keys", "pmapkit.core.programs.compiling.compile_program"):
        assert _public_prefix(path) is None, path
    assert _public_prefix("pmapkit.pjit.pjit") == "pmapkit.pjit"
    assert _public_prefix("pmapkit.COMPILED") == "pmapkit"


def _is_module(path):
    try:
        importlib.import_module(path)
    except ImportError:
        return False
    return True


def test_every_public_module_imports():
    for name in PUBLIC:
        assert _is_module(name), name


_AUTODOC = re.compile(r"^\.\. auto(?:module|class|function|data|exception):: (\S+)", re.M)


def _reference_targets():
    """(page, name) for every autodoc directive of docs/reference/."""
    return [(page, target) for page in sorted((ROOT / "docs" / "reference").glob("*.md"))
            for target in _AUTODOC.findall(page.read_text())]


def test_the_reference_reads_only_public_modules():
    targets = [target for _, target in _reference_targets()]
    assert targets
    for target in targets:
        home = _public_prefix(target)
        assert home is not None, f"{target}: not in pmapkit._PUBLIC_MODULES"
        # A member (pmapkit.pjit.pjit), never a module below a public one.
        assert target == home or not _is_module(target), target


def test_the_reference_has_one_page_per_public_module():
    pages = {page.stem: target for page, target in _reference_targets()}
    assert sorted(pages) == sorted(PUBLIC), "docs/reference/<module>.md per public module"
    for stem, target in pages.items():
        assert target == stem, f"docs/reference/{stem}.md documents {target}"
    # The package's page names every name of its __all__.
    package_page = (ROOT / "docs" / "reference" / "pmapkit.md").read_text()
    for name in pmapkit.__all__:
        assert f"`{name}`" in package_page, name


def test_user_docs_name_no_internal_module():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    internal = []
    for page in pages:
        if page.name == "architecture.md":  # the maintainer's guide names them all
            continue
        for path in _MODULE_PATH.findall(page.read_text()):
            if _public_prefix(path) is None and _is_module(path):
                internal.append(f"{page.relative_to(ROOT)}: {path}")
    assert not internal, internal
