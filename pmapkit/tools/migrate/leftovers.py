"""The check behind "0 left": a scan of the migrated source for anything
classic still in it, whatever the rules did or missed.

A use is classic when its qualified name (through the file's imports), or a
dotted prefix of it, is

- a name of the census (``pmapkit.legacy.names``, every era it knows) that
  this JAX lacks or deprecates;
- deprecated by JAX itself (``deprecations``: it would warn, and a migrated
  file runs with DeprecationWarnings as errors);
- not there on this JAX at all (``from jax import partial``, a module of
  ``jax.experimental`` that is gone), looked up without running modules
  that are not loaded yet;

and a star import (``from jax.experimental.maps import *``) of such a module
is one too. So is what the census of real use (``census.real_use()``) counts
beyond module names, where this JAX lacks it: an attribute of JAX's config
object (``jax.config.enable_omnistaging``), an option given to
``jax.config.update`` (``"jax_array"``), and a classic array member read on
anything (``x.to_py()``, ``x.device_buffers``, the call ``x.device()``); an
option ``config.read`` reads too. A name the program itself sets on a module
(``jax.my_flag = 1``) is the program's, not a leftover. Each is a
``report.Left`` line.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import types
import warnings

import jax
import libcst as cst
from libcst.metadata import PositionProvider, QualifiedNameProvider

from pmapkit.legacy import census as legacy_census
from pmapkit.legacy import names as census
from pmapkit.tools.migrate import deprecations
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.report import Left

_GONE, _THERE, _UNKNOWN = "gone", "there", "unknown"


def _prefixes(q):
    parts = q.split(".")
    return [".".join(parts[:cut]) for cut in range(1, len(parts) + 1)]


@functools.lru_cache(maxsize=4096)
def _lookup(q):
    """(_GONE, the first missing prefix) / (_THERE, q) / (_UNKNOWN, q): whether
    the dotted name ``q`` exists on this JAX. A submodule not yet loaded is
    found by its spec; below it, a module whose import fails for want of
    another package (jax2tf without TensorFlow) is _UNKNOWN, never gone."""
    parts = q.split(".")
    obj = jax
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, part in enumerate(parts[1:], start=1):
            prefix = ".".join(parts[:k + 1])
            if isinstance(obj, types.ModuleType):
                try:
                    spec = importlib.util.find_spec(prefix)
                except (ImportError, ValueError):
                    spec = None
                if spec is not None:
                    try:
                        obj = importlib.import_module(prefix)
                    except Exception:
                        return _UNKNOWN, q
                    continue
            try:
                obj = getattr(obj, part)
            except AttributeError:
                return (_GONE, prefix) if isinstance(obj, types.ModuleType) else (_UNKNOWN, q)
            except Exception:
                return _UNKNOWN, q
    return _THERE, q


@functools.lru_cache(maxsize=256)
def _is_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _census_why(name):
    record = census.by_name(name)
    modern = f"; use {record.modern}" if record.modern else ""
    return f"removed in JAX {record.removed_in}{modern}"


#: What names a config option in its first argument.
_CONFIG_CALLS = frozenset(f"jax.config.{prefix}{call}" for prefix in ("", "config.")
                          for call in ("update", "read", "_read"))


@functools.lru_cache(maxsize=1)
def _real_use():
    """``{name: record}`` of the census of real use."""
    return {r.name: r for r in legacy_census.real_use()}


def _real_use_why(name):
    if census.known(name):
        record = census.by_name(name)
        why = f"; {record.why}" if record.why else ""
        return f"removed in JAX {record.removed_in}{why}; use {record.modern}"
    record = _real_use().get(name)
    used = f"; reached by {record.repos} public repositories" if record else ""
    return f"not in JAX {jax.__version__}{used}"


@functools.lru_cache(maxsize=256)
def config_attr(attr):
    """(name, why) when JAX's config object lacks ``attr``, else None."""
    config = jax.config
    if attr.startswith("__") or attr in config.values or hasattr(config, attr):
        return None
    name = f"jax.config.{attr}"
    return name, _real_use_why(name)


@functools.lru_cache(maxsize=256)
def config_option(option):
    """(name, why) for an option ``jax.config.update`` no longer knows."""
    if not option.startswith("jax_") or option in jax.config.values:
        return None
    name = f"jax.config:{option}"
    removed = legacy_census.config_removed_in(option)
    why = (f"config option removed in JAX {removed}" if removed
           else _real_use_why(name))
    return name, why


@functools.lru_cache(maxsize=1)
def _lacking_array_members():
    """Classic array members the census of real use counts that a
    ``jax.Array`` of this JAX lacks."""
    import numpy as np
    probe = jax.device_put(np.zeros((), np.float32))
    lacking = set()
    for record in legacy_census.real_use():
        if record.kind == "array_member":
            attr = record.name.rpartition(".")[2]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if not hasattr(probe, attr):
                    lacking.add(attr)
    return frozenset(lacking)


#: Classic DeviceArray methods jax.Array never had (beyond the census of real use).
_ARRAY_GONE = ("to_py", "block_host_until_ready")


def array_member(attr, called_bare=False):
    """(name, why) for a classic array member this JAX lacks (``device``:
    only its call without arguments, the classic method)."""
    if attr == "device":
        return ("jax.Array.device", _real_use_why("jax.Array.device")) if called_bare else None
    if attr in _lacking_array_members() or (attr in _ARRAY_GONE
                                            and not hasattr(jax.Array, attr)):
        name = f"jax.Array.{attr}"
        return name, _real_use_why(name)
    return None


@functools.lru_cache(maxsize=4096)
def classic(q):
    """(the classic name, why) for a qualified name ``q`` that is or lies
    under something classic on this JAX, else None."""
    if not q.startswith("jax.") and q != "jax":
        return None
    status, missing = _lookup(q)
    for prefix in reversed(_prefixes(q)):
        if census.known(prefix):
            gone = status == _GONE and (prefix + ".").startswith(missing + ".")
            if gone or deprecations.message(prefix):
                return prefix, _census_why(prefix)
    for prefix in _prefixes(q):
        message = deprecations.message(prefix)
        if message:
            return prefix, f"deprecated in JAX {jax.__version__}: {message}"
    if status == _GONE:
        return missing, f"not in JAX {jax.__version__}"
    if q.startswith("jax.config.") and q.count(".") >= 2:
        return config_attr(q.split(".")[2])
    return None


class _Scan(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

    def __init__(self, own=frozenset()):
        super().__init__()
        self.own = own        # names the program sets on modules itself
        self.guards = []      # names the enclosing conditions test exist
        self.found = []       # (line, name, why)

    def _line(self, node):
        return self.get_metadata(PositionProvider, node).start.line

    def _add(self, node, hit, what=""):
        if hit is not None:
            name, why = hit
            if name.rpartition(".")[2].rpartition(":")[2] in self._guarded():
                return       # runs only where this JAX has it (hasattr/callable)
            self.found.append((self._line(node), name, what + why))

    def _guarded(self):
        return set().union(*self.guards) if self.guards else ()

    def visit_If(self, node):
        self.guards.append(guarded_names(node.test))

    def leave_If(self, node):
        self.guards.pop()

    def visit_IfExp(self, node):
        self.guards.append(guarded_names(node.test))

    def leave_IfExp(self, node):
        self.guards.pop()

    def visit_Import(self, node):
        for alias in node.names:
            self._add(node, classic(sx.code(alias.name)))
        return False

    def visit_ImportFrom(self, node):
        if node.relative or node.module is None:
            return False
        module = sx.code(node.module)
        star = isinstance(node.names, cst.ImportStar)
        what = f"star import of {module}: " if star else ""
        if module.startswith("jax.") and not _is_module(module):
            # ``from jax.config import config``: jax.config is no module now
            self._add(node, classic(module) or (module, f"no module {module} in JAX "
                                                        f"{jax.__version__}"), what)
        elif star:
            self._add(node, classic(module), what)
        else:
            for alias in node.names:
                self._add(node, classic(f"{module}.{sx.code(alias.name)}"))
        return False

    def _reference(self, node):
        found = sorted(n.name for n in self.get_metadata(QualifiedNameProvider, node, set())
                       if n.name.startswith("jax."))
        if not found:
            return True          # e.g. ``f(x).attr``: look inside
        if any(found[0] == n or found[0].startswith(n + ".") for n in self.own):
            return False         # the program's own attribute of a module
        self._add(node, classic(found[0]))
        return False             # the outermost name of a chain says it all

    def visit_Attribute(self, node):
        qualified = self.get_metadata(QualifiedNameProvider, node, set())
        if not any(n.name.startswith("jax.") for n in qualified):
            self._add(node, array_member(sx.code(node.attr)))
        return self._reference(node)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, cst.Attribute):
            names = {n.name for n in self.get_metadata(QualifiedNameProvider, func, set())}
            if names & _CONFIG_CALLS and node.args:
                value = node.args[0].value
                if isinstance(value, cst.SimpleString):
                    self._add(node, config_option(value.evaluated_value))
            elif sx.code(func.attr) == "device" and not node.args:
                self._add(node, array_member("device", called_bare=True))
        return True

    def visit_Name(self, node):
        return self._reference(node)


class _Checks(cst.CSTVisitor):
    def __init__(self):
        super().__init__()
        self.names = set()

    def visit_Call(self, node):
        func, args = node.func, node.args
        if isinstance(func, cst.Name) and func.value == "hasattr" and len(args) == 2 \
                and isinstance(args[1].value, cst.SimpleString):
            self.names.add(args[1].value.evaluated_value)
        elif isinstance(func, cst.Name) and func.value == "callable" and len(args) == 1 \
                and isinstance(args[0].value, cst.Attribute):
            self.names.add(args[0].value.attr.value)


def guarded_names(test):
    """The attribute names a condition checks first (``hasattr(config,
    "enable_omnistaging")``, ``callable(b.device)``): code under it is written
    to run on either JAX, so a classic name there is no leftover."""
    checks = _Checks()
    test.visit(checks)
    return frozenset(checks.names)


class _OwnAttributes(cst.CSTVisitor):
    """The qualified names the program assigns to (``jax.my_flag = 1``)."""
    METADATA_DEPENDENCIES = (QualifiedNameProvider,)

    def __init__(self):
        super().__init__()
        self.names = set()

    def visit_AssignTarget(self, node):
        if isinstance(node.target, cst.Attribute):
            self.names.update(n.name for n in self.get_metadata(
                QualifiedNameProvider, node.target, set()) if n.name.startswith("jax."))


def scan(source):
    """[(line, classic name, why)] for the migrated ``source``, one per line and name."""
    wrapper = cst.MetadataWrapper(cst.parse_module(source))
    own = _OwnAttributes()
    wrapper.visit(own)
    scanner = _Scan(frozenset(own.names))
    wrapper.visit(scanner)
    return sorted(set(scanner.found))


def _related(a, b):
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def unreported(source, left, changed=True):
    """``Left`` records for what ``scan`` finds in the migrated ``source``
    beyond the names the rules already reported in ``left``; ``changed``: the
    migrated file's lines differ from the original's (the report says whose
    line it gives)."""
    said = [k.name for k in left]
    where = " (line {} of the migrated file)" if changed else ""
    return [Left(line, name, why + where.format(line))
            for line, name, why in scan(source)
            if not any(_related(name, n) for n in said)]
