"""The public names of a classic JAX release, read from its source
distribution without running it.

jaxlib wheels of the releases before 0.4.13 do not install here, so their
names are taken statically: every public module of the release's ``jax``
sdist (``public_module``: its files outside private, test and example
folders; no fixed list) is parsed with ``ast``, and its exports are its
``__all__`` where it has a literal one, else every top-level binding (defs,
classes, assignments, imports, ``from m import *`` of another JAX module,
expanded), inside top-level ``if``/``try`` blocks too. As for the collected
releases, private names, modules merely imported (a package's own
submodules stay) and typing helpers are left out; a name a module imported
from outside JAX (``from functools import partial`` in the classic
``jax/api.py``, reached as ``jax.partial``) is kept with its origin, which
serves it as the same object today.
"""
from __future__ import annotations

import ast
import re
import tarfile

__all__ = ["SKIP_PARTS", "public_module", "release_modules", "config_options"]

_TYPING = {"typing", "typing_extensions", "abc", "collections.abc", "__future__", "types"}

#: Folders of a release's package that hold no API: tests and examples.
SKIP_PARTS = ("tests", "examples", "testdata")


def public_module(dotted):
    """Whether module ``dotted`` of a release's files is public API: no part
    private (``_src``, ``_version``), none a test or example folder, not a
    ``*_test`` module (the collector in ``census_collect`` applies the same
    rule to an installed release)."""
    parts = dotted.split(".")
    return (not any(p.startswith("_") or p in SKIP_PARTS for p in parts)
            and not parts[-1].endswith("_test"))


class _Source:
    """The module files of one sdist: ``{dotted name: (is_package, text)}``."""

    def __init__(self, path):
        self.files = {}
        self.texts = []     # every module's source, private ones too
        self.version = None
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                top = re.fullmatch(r"jax-(\d+(?:\.\d+)+)", parts[0])
                if top:     # the sdist's folder names its release
                    self.version = top.group(1)
                if len(parts) < 3 or parts[1] != "jax" or not member.name.endswith(".py"):
                    continue
                text = tar.extractfile(member).read().decode("utf-8", "replace")
                inner = parts[1:]
                self.texts.append(text)
                if inner[-1] == "__init__.py":
                    self.files[".".join(inner[:-1])] = (True, text)
                else:
                    self.files[".".join(inner)[:-3]] = (False, text)
        self._bindings = {}

    def bindings(self, module, active=()):
        """``(bindings, __all__ or None)`` of ``module``: ``{name: kind}``
        where kind is ``("def",)``, ``("module", dotted)``, ``("jax",
        dotted)`` (imported from a JAX module) or ``("ext", dotted)``."""
        if module in self._bindings:
            return self._bindings[module]
        if module in active or module not in self.files:
            return {}, None
        is_package, text = self.files[module]
        tree = ast.parse(text)
        found, exported = {}, None
        base = module if is_package else module.rpartition(".")[0]

        def absolute(node):
            if not node.level:
                return node.module or ""
            parts = base.split(".")
            parts = parts[:len(parts) - (node.level - 1)]
            return ".".join(parts + ([node.module] if node.module else []))

        def literal(value):
            try:
                names = ast.literal_eval(value)
            except ValueError:
                return None
            return [n for n in names if isinstance(n, str)]

        def visit(body):
            nonlocal exported
            for stmt in body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found[stmt.name] = ("def",)
                elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    for target in targets:
                        if isinstance(target, ast.Name) and target.id == "__all__":
                            exported = literal(stmt.value) if stmt.value is not None else None
                            continue
                        for node in ast.walk(target):
                            if isinstance(node, ast.Name):
                                found[node.id] = ("def",)
                elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) \
                        and stmt.target.id == "__all__" and exported is not None:
                    exported += literal(stmt.value) or []
                elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                        and isinstance(stmt.value.func, ast.Attribute) \
                        and isinstance(stmt.value.func.value, ast.Name) \
                        and stmt.value.func.value.id == "__all__" and exported is not None:
                    args = stmt.value.args
                    if stmt.value.func.attr == "extend" and args:
                        exported += literal(args[0]) or []
                    elif stmt.value.func.attr == "append" and args:
                        exported += literal(ast.List([args[0]], ast.Load())) or []
                elif isinstance(stmt, ast.Import):
                    for alias in stmt.names:
                        if alias.asname:
                            found[alias.asname] = ("module", alias.name)
                        else:
                            head = alias.name.partition(".")[0]
                            found[head] = ("module", head)
                elif isinstance(stmt, ast.ImportFrom):
                    source = absolute(stmt)
                    for alias in stmt.names:
                        if alias.name == "*":
                            if source in self.files:
                                names, _ = self.exports(source, active + (module,))
                                found.update(names)
                            continue
                        full = f"{source}.{alias.name}"
                        if full in self.files:
                            kind = ("module", full)
                        elif source == "jax" or source.startswith("jax."):
                            kind = self.bindings(source, active + (module,))[0].get(
                                alias.name, ("jax", full))
                        else:
                            kind = ("ext", full)
                        found[alias.asname or alias.name] = kind
                elif isinstance(stmt, ast.Delete):
                    for target in stmt.targets:
                        if isinstance(target, ast.Name):
                            found.pop(target.id, None)
                elif isinstance(stmt, ast.If):
                    visit(stmt.body)
                    visit(stmt.orelse)
                elif isinstance(stmt, ast.Try):
                    visit(stmt.body)
                    for handler in stmt.handlers:
                        visit(handler.body)
                    visit(stmt.orelse)
                    visit(stmt.finalbody)
                elif isinstance(stmt, ast.With):
                    visit(stmt.body)

        visit(tree.body)
        result = (found, exported)
        self._bindings[module] = result
        return result

    def exports(self, module, active=()):
        """``({name: kind}, has __all__)``: what ``from module import *``
        binds (``__all__``, else every name not starting with ``_``)."""
        found, exported = self.bindings(module, active)
        if exported is not None:
            return {n: found.get(n, ("def",)) for n in exported}, True
        return {n: k for n, k in found.items() if not n.startswith("_")}, False

    def public_names(self, module):
        """``{name: origin or None}``: the public names of ``module``, each
        with the outside object it re-exports (``functools.partial``)."""
        names, _ = self.exports(module)
        out = {}
        for name, kind in names.items():
            if name.startswith("_"):
                continue
            if kind[0] == "module":
                if kind[1] != f"{module}.{name}":
                    continue     # a module it imported, not one of its own
            elif kind[0] == "ext":
                owner = kind[1].rpartition(".")[0]
                if owner in _TYPING or owner.partition(".")[0] in _TYPING:
                    continue
                out[name] = kind[1]
                continue
            out[name] = None
        # a package's public modules of the list are its names (``from jax
        # import lax_linalg`` imports one whether or not the package did)
        for other in self.files:
            parent, _, child = other.rpartition(".")
            if parent == module and public_module(other):
                out.setdefault(child, None)
        return out


def release_modules(sdist_path):
    """``(version, {module: {name: origin or None}})`` of a ``jax`` sdist:
    every public module of its files (``public_module``; no fixed list)."""
    source = _Source(sdist_path)
    version = source.version
    if version is None:
        raise ValueError(f"sdist_path must be a jax source distribution; {sdist_path!r} "
                         "has no jax-VERSION/ folder")
    modules = {m: source.public_names(m) for m in sorted(source.files) if public_module(m)}
    return version, modules


_DEFINES = re.compile(r"^(define_\w+|\w+_state|\w+_flag|DEFINE_\w+)$")


def _options(texts):
    """The ``jax_*`` config options the sources define: the first argument
    (or ``name=``) of every ``define_bool_state``/``bool_state``/
    ``flags.DEFINE_bool``-like call."""
    found = set()
    for text in texts:
        if "jax_" not in text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if not _DEFINES.match(called):
                continue
            named = [k.value for k in node.keywords if k.arg == "name"]
            first = node.args[0] if node.args else (named[0] if named else None)
            if isinstance(first, ast.Constant) and isinstance(first.value, str) \
                    and first.value.startswith("jax_"):
                found.add(first.value)
    return found


def config_options(sdist_path):
    """``(version, {option names})``: the config options a ``jax`` sdist defines."""
    source = _Source(sdist_path)
    return source.version, _options(source.texts)
