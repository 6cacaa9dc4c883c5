"""How ``pmapkit.legacy.install`` puts classic names in place: the module
finder, names set on JAX's modules, refusals, and the classic pjit / export
modules. The package's docstring (``pmapkit/legacy/__init__.py``) says what
is served; ``names`` holds the census, ``report`` the ``--report`` table.
"""
from __future__ import annotations

import dis
import functools
import gc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import types
import warnings

import jax

import pmapkit
from pmapkit.legacy import census as legacy_census
from pmapkit.legacy import classic_config
from pmapkit.legacy import classic_export_call
from pmapkit.legacy import classic_make_mesh
from pmapkit.legacy import classic_pure_callback
from pmapkit.legacy import classic_stack_inputs
from pmapkit.legacy import classic_static_args
from pmapkit.legacy import classic_values
from pmapkit.legacy.installed_names import InstalledNames
from pmapkit.legacy import names as legacy_names
from pmapkit.legacy import report as legacy_report

__all__ = ["install", "installed"]

_installed: list[str] = []


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a fixed set of module names, each from a function that returns
    the module object (built or imported on first import)."""

    def __init__(self):
        self.modules = {}    # full name -> () -> module
        self._own_specs = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.modules and _refused_module(self.modules[fullname]) \
                and _probing_only():
            # importlib.util.find_spec of a removed module: not found, as on
            # the classic releases after it went (importing it still raises
            # the clear error)
            return None
        if fullname not in self.modules:
            return None
        is_package = fullname in _PACKAGES
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec):
        module = self.modules[spec.name]()
        _refuse_census_names(module, spec.name)
        if module.__name__ == spec.name and not _refused_module(self.modules[spec.name]):
            # a stand-in built for the classic name: every public name it
            # serves is what ``from module import *`` gives, as classic
            # modules without ``__all__`` gave theirs
            module.__all__ = sorted(n for n in vars(module) if not n.startswith("_"))
        if legacy_report.enabled():
            legacy_report.note(spec.name, "imports")
        self._own_specs[spec.name] = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module):
        # The module is complete as created. The import system gave it the
        # alias's spec; a pmapkit module keeps its own (its name, reloads).
        own = self._own_specs.pop(module.__spec__.name)
        if own is not None:
            module.__spec__ = own


_PACKAGES = {"jax.experimental.jax2tf"}

#: How the one line ``install`` says on stderr starts (``pmapkit migrate
#: --check`` knows it by this: never a program's own error).
STARTUP_PREFIX = "pmapkit.legacy: "


def _refused_module(make):
    return isinstance(make, functools.partial) and make.func is _raise_import


def _probing_only():
    """Whether the finder is asked by ``importlib.util.find_spec`` (a probe
    for the module) rather than by an import statement."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == "<frozen importlib._bootstrap>":
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "find_spec":
        return False
    where = frame.f_code.co_filename.replace("\\", "/")
    return where == "<frozen importlib.util>" or where.endswith("importlib/util.py")
_finder = _AliasFinder()


def installed() -> tuple[str, ...]:
    """The names ``install`` has put in place so far, in order."""
    return tuple(_installed)


def install(route_pmap: bool = False, report: bool | None = None,
            classic_prng: bool = False, *, announce: bool = True) -> InstalledNames:
    """Installs pmapkit as the modules and names this JAX lacks (see the module
    docstring); with ``route_pmap``, ``jax.pmap`` becomes ``pmapkit.pmap``.
    With ``classic_prng`` (``pmapkit run`` without ``--modern-prng``),
    ``jax_threefry_partitionable`` is set to False, its default before JAX
    0.5, so ``jax.random`` draws are those of the classic releases (unless
    the ``JAX_THREEFRY_PARTITIONABLE`` environment variable says otherwise).
    With ``report`` (default: the ``PMAPKIT_REPORT`` environment variable) the
    classic names the program uses are counted and, at exit, listed on stderr
    with their modern replacements; counting needs the report on at the first
    install.

    Idempotent: what is already installed is left as it is. Returns the names
    installed by this call (a tuple whose repr is one short line) and, when
    there are any and ``announce`` is true, says so in one line on stderr
    (the workers of a ``pmapkit run`` tree install quietly).
    """
    # The census is tens of thousands of small acyclic objects (pairs,
    # records): cyclic collections over JAX's heap while building them cost
    # more than the work itself, so none runs during install.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _install(route_pmap, report, classic_prng, announce)
    finally:
        if collecting:
            gc.enable()


def _install(route_pmap, report, classic_prng, announce=True):
    if report is None:
        report = legacy_report.env_requests_report()
    if report and not _installed:
        legacy_report.enable(report)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    new = []
    new += _install_pjit()
    new += _install_module("jax.experimental.maps", classic_values.maps_module)
    new += _install_name(jax.experimental, "jax.experimental.PartitionSpec",
                         _counted("jax.experimental.PartitionSpec",
                                  jax.sharding.PartitionSpec))
    new += _install_module("jax.experimental.host_callback",
                           _reported("jax.experimental.host_callback", "pmapkit.host_callback"))
    new += _install_jax_export()
    new += _install_module("jax.experimental.export",
                           _reported("jax.experimental.export", "pmapkit.export"))
    # jax.export's own call reads a numpy input at the call, as classic JAX's did.
    classic_export_call.read_inputs_at_call()
    # jax.pure_callback under vmap: once per element unless told otherwise,
    # as before JAX 0.4.34 (vectorized=False by default).
    classic_pure_callback.classic_vmap_default()
    # jnp.vstack and its family take lists and tuples as elements (JAX <= 0.9,
    # with a DeprecationWarning from 0.4.17), and a generator (JAX <= 0.4.16).
    classic_stack_inputs.classic_sequence_elements()
    # jax.jit keys an unhashable static argument by identity (JAX <= 0.2.5).
    classic_static_args.classic_unhashable_statics()
    # jax.make_mesh's axes are Auto unless axis_types says otherwise (0.4.31-0.9).
    classic_make_mesh.classic_auto_axes()
    for name in ("device_put_replicated", "device_put_sharded"):
        ours = getattr(pmapkit, name, None)
        if ours is not None:
            new += _install_name(jax, f"jax.{name}", _counted(f"jax.{name}", ours))
    new += _install_removed_names()
    new += _install_real_use()
    new += _install_census_names()
    new += _install_config_options()
    _install_refusals()
    _serve_submodules()
    # One line of at most 100 columns (the removed names that raise, and
    # everything else, are the --report's).
    said = [f"served {len(new)} classic names"] if new else []
    if classic_prng and _set_classic_prng():
        said.append("classic jax.random")
    if route_pmap and not _is_ours(jax.pmap, pmapkit.pmap):
        jax.pmap = _counted("jax.pmap", pmapkit.pmap)
        new.append("jax.pmap")
        said.append("jax.pmap routed")
    _installed.extend(new)
    if said and announce:
        print(f"{STARTUP_PREFIX}{'; '.join(said)} (list: --report)",
              file=sys.stderr, flush=True)
    return InstalledNames(new)


def _set_classic_prng():
    """``jax_threefry_partitionable`` off, as JAX had it before 0.5; an
    explicit ``JAX_THREEFRY_PARTITIONABLE`` in the environment wins.
    Whether it changed anything."""
    import os
    if "JAX_THREEFRY_PARTITIONABLE" in os.environ or not jax.config.jax_threefry_partitionable:
        return False
    jax.config.update("jax_threefry_partitionable", False)
    return True


def _reported(name, ours):
    """() -> the module ``ours`` served as ``name``; while the report is on,
    a stand-in counting the reads of the names the table knows there
    (``hcb.call``, ``id_tap``, ``call_exported``, ...)."""
    def make():
        module = importlib.import_module(ours)
        if not legacy_report.enabled():
            return module
        known = {r.attr for r in legacy_names.SYSTEMS if r.owner == name}
        return legacy_report.counting_module(name, module, known)
    return make


def _counted(name, value, how="calls"):
    """``value``, or its counting stand-in while the report is on."""
    return legacy_report.counted(name, value, how) if legacy_report.enabled() else value


def _is_ours(present, value):
    return present is value or getattr(present, "__wrapped__", None) is value


def _defer(record):
    """Set ``record`` when the program imports its module: ``[its name]`` the
    first time, ``[]`` when it waits already."""
    pending = _pending_names.setdefault(record.owner, [])
    if record in pending:
        return []
    pending.append(record)
    _on_import(record.owner)
    return [record.name]


def _install_removed_names():
    """The census (pmapkit.legacy.names): names set on JAX's modules, the
    array properties, and the modules served by the finder; each only where
    this JAX lacks it."""
    new = []
    for record in legacy_names.NAMES:
        if record.owner not in sys.modules and _module_exists(record.owner):
            # set when the program imports its module (install imports nothing)
            if record.owner not in _finder.modules:
                new += _defer(record)
                continue
        owner = importlib.import_module(record.owner)
        if not _has(owner, record.attr):
            new += _install_name(owner, record.name, _counted(record.name, record.make()))
    # Decided from the classes, never from an instance: making an array or a
    # device list here would start JAX's backends, and a program that sets
    # XLA_FLAGS after ``import jax`` (before its first JAX operation, as
    # ``chex.set_n_cpu_devices`` does) would get the devices of the flags
    # before it.
    for cls, records in ((legacy_names.array_type(), legacy_names.PROPERTIES),
                         (jax.sharding.NamedSharding, legacy_names.SHARDING_PROPERTIES)):
        for record in records:
            served = _classic_property(cls, record)
            if served is not None:
                setattr(cls, record.attr, served)
                new.append(record.name)
    for record in legacy_names.MODULES:
        if record.name == "jax.config":
            new += _install_config_module(record)
        else:
            new += _install_module(record.name, record.make)
    return new


def _classic_property(cls, record):
    """The property serving ``record`` on ``cls``, or None where it is in
    place already. Where ``cls`` has no such attribute, the classic one; where
    JAX keeps the name as a property (JAX 0.10's ``device_buffers`` raises
    AttributeError), a property reading JAX's first and the classic one only
    where JAX's raises AttributeError: whether JAX's works is known only on
    an instance, and install makes none."""
    present = inspect.getattr_static(cls, record.attr, None)
    if getattr(getattr(present, "fget", None), "_pmapkit_classic", False):
        return None
    classic = _counted(record.name, record.make(), "reads")
    if present is None:
        def read(self):
            return classic(self)
    elif isinstance(present, property) and present.fget is not None:
        jax_read = present.fget

        def read(self):
            try:
                return jax_read(self)
            except AttributeError:
                return classic(self)
    else:
        return None
    functools.update_wrapper(read, classic)
    read._pmapkit_classic = True
    return property(read, legacy_names.refuse_assignment(
        record.name, "jax.make_array_from_single_device_arrays(x.shape, x.sharding, buffers)"))


def _install_real_use():
    """What real code reached (``names.REAL_USE``, ``CONFIG_ATTRS``, the
    array's classic members): each where this JAX lacks it. A record whose
    owner is not imported yet waits for its import; one whose owner is an
    object reached by attributes (``jax.ad``, ``jax.lib.xla_client``) is set
    on that object."""
    new = []
    for record in legacy_names.REAL_USE:
        owner = sys.modules.get(record.owner)
        if owner is None and _module_exists(record.owner):
            if record.owner not in _finder.modules:
                new += _defer(record)
                continue
            owner = importlib.import_module(record.owner)
        if owner is None:
            owner = _owner_object(record.owner)
        if owner is not None:
            new += _serve(owner, record)
    config = jax.config
    for record in legacy_names.CONFIG_ATTRS:
        if not _has(config, record.attr):
            setattr(config, record.attr, _counted(record.name, record.make(), "uses"))
            new.append(record.name)
    # From the class, never an instance (install starts no backend: see
    # _install_removed_names).
    array_type = legacy_names.array_type()
    for record in legacy_names.ARRAY_METHODS:
        if inspect.getattr_static(array_type, record.attr, None) is None:
            setattr(array_type, record.attr, _counted(record.name, record.make()))
            new.append(record.name)
    for record in legacy_names.ARRAY_PROPERTIES:
        served = _classic_property(array_type, record)
        if served is not None:
            setattr(array_type, record.attr, served)
            new.append(record.name)
    return new


def _owner_object(name):
    """The object ``name`` reaches by attributes from an imported module
    (``jax.ad``: JAX's namespace; ``jax.lib.xla_client``: the jaxlib module
    served there), or None."""
    head, _, rest = name.partition(".")
    obj = sys.modules.get(head)
    for part in rest.split(".") if rest else ():
        if obj is None:
            return None
        with warnings.catch_warnings(), legacy_report.unseen():
            warnings.simplefilter("ignore")
            obj = getattr(obj, part, None)
    return obj


def _serve(owner, record):
    """Sets ``record``'s value on ``owner`` where it lacks it; a lazy record
    is built on the first read (a chained module ``__getattr__``)."""
    if (record.lazy or record.live) and isinstance(owner, types.ModuleType):
        lazy = _chain_getattr(owner)[3]
        if record.attr in lazy or _has(owner, record.attr):
            return []
        lazy[record.attr] = record
        return [record.name]
    if _has(owner, record.attr):
        return []
    return _install_name(owner, record.name, _counted(record.name, record.make()))


def _install_config_options():
    """The removed config options ``CONFIG_OPTIONS`` serves become options
    of JAX's config again; ``jax.config.update`` of another removed option
    raises its clear error instead of "Unrecognized config option"."""
    from pmapkit import _jax_private as jp
    new = []
    for option in legacy_names.CONFIG_OPTIONS:
        if jp.define_bool_option(option.name, option.default,
                                 f"Classic option ({option.why}).", option.check) is not None:
            new.append(option.name)
    config = jax.config
    if getattr(config.update, "_pmapkit_classic", False):
        return new
    update = config.update

    def classic_update(name, value):
        if name not in config.values:
            text = legacy_names.removed_config_text(name)
            if text is not None:
                raise legacy_names.RemovedAttributeError(text)
        return update(name, classic_config.classic_update_value(name, value))

    classic_update._pmapkit_classic = True
    classic_update.__doc__ = update.__doc__
    config.update = classic_update
    return new


def _install_census_names():
    """Census names JAX still has, public, under jax.extend (the same
    objects), set on their classic module where this JAX lacks them."""
    new = []
    for record in legacy_names.census_records().values():
        if record.make is None or record.owner not in sys.modules:
            continue
        new += _serve(sys.modules[record.owner], record)
    return new


def _census_refusals_by_owner():
    """``{module: [records]}`` of the census names refused (JAX internals and
    the table's refusals), by the module that held them."""
    global _BY_OWNER
    if _BY_OWNER is None:
        by_owner = {}
        records = [r for r in legacy_names.census_records().values() if r.make is None]
        for record in records + list(legacy_names.REFUSED_NAMES) + list(
                legacy_names.REFUSED_REAL_USE):
            by_owner.setdefault(record.owner, []).append(record)
        _BY_OWNER = by_owner
    return _BY_OWNER


_BY_OWNER = None
_pending_names: dict[str, list] = {}   # module -> census records set on its import
_scheduled: set[str] = set()    # owners whose refusals wait for their import


def _refuse_census_names(module, name):
    """A module being created or imported gets its census names: those
    served (set where it lacks them) and the refusals of the rest."""
    for record in _census_served_by_owner().get(name, ()):
        _serve(module, record)
    records = _census_refusals_by_owner().get(name)
    if records:
        _refuse_names(module, name, records)


def _census_served_by_owner():
    global _SERVED_BY_OWNER
    if _SERVED_BY_OWNER is None:
        by_owner = {}
        for record in legacy_names.census_records().values():
            if record.make is not None:
                by_owner.setdefault(record.owner, []).append(record)
        _SERVED_BY_OWNER = by_owner
    return _SERVED_BY_OWNER


_SERVED_BY_OWNER = None


def _on_import(name):
    """Serve ``name``'s waiting census names when the program imports it,
    whichever loader executes it (its own, pytest's assertion rewriter, a
    zip importer): the import system ends every submodule import by setting
    the module on its parent package, and the parent, once watched, sees
    that moment. Install imports nothing more."""
    _waiting.add(name)
    _watch_path_to(name)


def _watch_path_to(name):
    parent_name = name.rpartition(".")[0]
    if not parent_name:
        return
    parent = sys.modules.get(parent_name)
    if parent is not None:
        _watch(parent)
    else:                 # watched from its own parent, once that is imported
        _on_the_way.add(parent_name)
        _watch_path_to(parent_name)


def _watch(package):
    cls = type(package)
    if getattr(cls, "_pmapkit_watched", False):
        return
    watched = _WATCHED_CLASSES.get(cls)
    if watched is None:
        def __setattr__(module, attr, value):
            cls.__setattr__(module, attr, value)
            if isinstance(value, types.ModuleType):
                _attached(value)
        watched = _WATCHED_CLASSES[cls] = type(
            cls.__name__, (cls,), {"__setattr__": __setattr__, "__slots__": (),
                                   "_pmapkit_watched": True, "__module__": cls.__module__})
    package.__class__ = watched


_WATCHED_CLASSES: dict[type, type] = {}
_waiting: set[str] = set()     # modules whose census names wait for their import
_on_the_way: set[str] = set()  # packages above those, not imported yet


def _attached(module):
    """``module`` has just been imported (and set on its package)."""
    name = getattr(module, "__name__", None)
    if name in _on_the_way:
        _on_the_way.discard(name)
        _watch(module)
        # Submodules its own __init__ imported were set on it before it was
        # watched: they are seen now.
        prefix = name + "."
        for below in sorted(n for n in _waiting | _on_the_way
                            if n.startswith(prefix) and n in sys.modules):
            _attached(sys.modules[below])
    if name in _waiting:
        _waiting.discard(name)
        for record in _pending_names.pop(name, ()):
            _serve(module, record)
        _refuse_census_names(module, name)


def _serve_submodules():
    """A served module is an attribute of its parent as an imported one is
    (classic ``jax/__init__`` imported ``jax.api``, so ``jax.api.f`` worked
    without ``import jax.api``); and a census submodule JAX still has but no
    longer imports at startup is imported on first read."""
    lazy = {}
    for full, make in list(_finder.modules.items()):
        if not (isinstance(make, functools.partial) and make.func is _raise_import):
            lazy.setdefault(full.rpartition(".")[0], set()).add(full.rpartition(".")[2])
    for module, attr in legacy_census.union():
        parent = sys.modules.get(module)
        path = getattr(parent, "__path__", None)
        if (path is not None and attr not in vars(parent)
                and importlib.machinery.PathFinder.find_spec(f"{module}.{attr}", path)):
            lazy.setdefault(module, set()).add(attr)
    for parent, attrs in lazy.items():
        if parent in sys.modules:
            _chain_getattr(sys.modules[parent])[0].update(attrs)


def _install_config_module(record):
    """``from jax.config import config``: a module put straight into
    ``sys.modules``, so importing it never sets the ``jax.config`` attribute
    (JAX's config object) to the module, as loading a submodule would."""
    if _module_exists(record.name):
        return []
    module = record.make()
    if legacy_report.enabled():
        del module.config      # served by __getattr__, so every read counts
        module.__getattr__ = legacy_report.counting_module_getattr(
            record.name, {"config": jax.config})
    sys.modules[record.name] = module
    return [record.name]


def internal_module_record(name):
    """The record refusing census module ``name`` that has no record of its
    own: a JAX internal (its release is the census's, ``Removed.removed_in``)."""
    return legacy_names.Removed(name=name, modern=legacy_names.INTERNAL, example="")


def _install_refusals():
    """Removed names without a faithful equivalent raise RemovedFromJax
    where they are touched (a removed module on import and as an attribute
    of its parent); returns the names this call refused."""
    refused = set()
    modules = list(legacy_names.REFUSED_MODULES)
    census_modules = {m for m, _ in legacy_census.union()}
    known = {r.name for r in modules}
    for name in sorted(census_modules - known):
        if not _module_exists(name) and name.partition(".")[0] == "jax":
            record = legacy_names.by_name(name) if legacy_names.known(name) else None
            modules.append(record or internal_module_record(name))
    for record in modules:
        if not _module_exists(record.name):
            _finder.modules[record.name] = functools.partial(_raise_import, record)
            refused.add(record.name)
    by_owner = {}
    for owner, records in _census_refusals_by_owner().items():
        by_owner.setdefault(owner, []).extend(records)
    for record in modules:
        by_owner.setdefault(record.owner, []).append(record)
    for owner, records in by_owner.items():
        if owner in _finder.modules:
            continue      # served modules: refused as they are created
        if owner in sys.modules:
            refused |= _refuse_names(sys.modules[owner], owner, records)
        elif owner not in _scheduled and _module_exists(owner):
            _scheduled.add(owner)
            _on_import(owner)
            refused |= {r.name for r in records}
        elif isinstance(_owner_object(owner), types.ModuleType):
            # a module served under another name (jax.lib.xla_client)
            refused |= _refuse_names(_owner_object(owner), owner, records)
    return refused


_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def _raise_import(record):
    """Raises ``record``'s removal error as an ImportError: the removed
    module is being imported."""
    if legacy_report.enabled():
        legacy_report.note(record.name, "refused uses")
    raise record.error(importing=True)


def _raise(record, depth=1):
    """Raises ``record``'s removal error. Read by ``from module import
    name`` (the frame ``depth`` levels up runs IMPORT_FROM), it is an
    ImportError: Python replaces any AttributeError there by "cannot import
    name", losing the message. Elsewhere an AttributeError, so ``hasattr``
    and ``getattr(m, name, default)`` still see the name missing."""
    if legacy_report.enabled():
        legacy_report.note(record.name, "refused uses")
    caller = sys._getframe(depth)
    importing = caller.f_code.co_code[caller.f_lasti] == _IMPORT_FROM
    raise record.error(importing=importing)


def _refuse_names(module, owner, records=None):
    """Chains a module ``__getattr__`` that raises the removal error for
    ``records`` (default: those of ``owner``) the module lacks, and defers
    every other name to the module's own ``__getattr__``, if any; returns
    the names it newly refused."""
    if records is None:
        records = [r for r in legacy_names.REFUSED_NAMES if r.owner == owner]
    refusals = _chain_getattr(module)[1]
    new = set()
    for record in records:
        if record.attr not in refusals and not _has(module, record.attr):
            refusals[record.attr] = record
            new.add(record.name)
    return new


def _chain_getattr(module):
    """``(submodules, refusals, values, lazy)`` of the one ``__getattr__``
    pmapkit.legacy chains on ``module``: JAX's own hook (if any) answers
    first; then a name in ``values`` (``{attr: (classic name, value)}``,
    only while the report is on) is served and seen by the report; a name in
    ``lazy`` (``{attr: record}``) is built, set on the module and served; a
    name in ``submodules`` is imported as ``module.name``; a name in
    ``refusals`` raises its removal error."""
    hook = module.__dict__.get("__getattr__")
    state = getattr(hook, "_pmapkit_state", None)
    if state is None:
        state = (set(), {}, {}, {})
        submodules, refusals, values, lazy = state
        original = hook

        def __getattr__(attr):
            ours = (attr in refusals or attr in submodules or attr in values
                    or attr in lazy)
            if original is not None:
                try:
                    return original(attr)
                except AttributeError:
                    if not ours:
                        raise
            elif not ours:
                raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}")
            if attr in values:
                full_name, value = values[attr]
                legacy_report.seen(full_name)
                return value
            if attr in lazy:
                record = lazy[attr]
                if record.live:
                    legacy_report.seen(record.name)
                    return record.make()()
                value = _counted(record.name, record.make())
                setattr(module, attr, value)
                del lazy[attr]
                return value
            if attr in submodules:
                return importlib.import_module(f"{module.__name__}.{attr}")
            _raise(refusals[attr], depth=2)

        __getattr__._pmapkit_state = state
        module.__getattr__ = __getattr__
    return state


def _has(obj, name):
    """``hasattr`` without JAX's deprecation warnings: a name that is only
    deprecated still exists; one whose deprecation raises does not. The
    installer's own look is no use the report counts."""
    with warnings.catch_warnings(), legacy_report.unseen():
        warnings.simplefilter("ignore")
        return hasattr(obj, name)


def _install_name(module, full_name, value):
    attr = full_name.rpartition(".")[2]
    if _has(module, attr):
        return []
    if isinstance(value, types.FunctionType) and "<locals>" in value.__qualname__:
        # an adapter made in a builder: pickled by reference to its classic
        # name, as the classic release's function was
        value.__module__, _, value.__qualname__ = full_name.rpartition(".")
    if legacy_report.enabled() and isinstance(module, types.ModuleType):
        # served by the module __getattr__, so an import alone is seen
        # (``from jax.experimental import PartitionSpec``)
        _chain_getattr(module)[2][attr] = (full_name, value)
    else:
        setattr(module, attr, value)
    return [full_name]


def _module_exists(name):
    """Whether module ``name`` is imported, installed by us, or importable,
    found without importing any package above it that is not imported yet."""
    return (name in sys.modules or name in _finder.modules
            or _spec_without_importing(name) is not None)


def _spec_without_importing(name):
    parent, _, _ = name.rpartition(".")
    if not parent:
        return importlib.machinery.PathFinder.find_spec(name)
    if parent in sys.modules:
        locations = getattr(sys.modules[parent], "__path__", None)
    else:
        spec = _spec_without_importing(parent)
        locations = None if spec is None else spec.submodule_search_locations
    if locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, locations)


def _install_module(name, make):
    if _module_exists(name):
        return []
    _finder.modules[name] = make
    return [name]


def _is_classic_pjit(fn):
    try:
        return "in_axis_resources" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _pjit_names():
    return {"pjit": _counted("jax.experimental.pjit.pjit", pmapkit.pjit),
            "with_sharding_constraint": _counted(
                "jax.experimental.pjit.with_sharding_constraint",
                pmapkit.with_sharding_constraint),
            "PartitionSpec": jax.sharding.PartitionSpec}


def _install_pjit():
    name = "jax.experimental.pjit"
    if not _module_exists(name):
        def make():
            module = types.ModuleType(name, "pmapkit's classic pjit, as "
                                            "jax.experimental.pjit had it.")
            for attr, value in _pjit_names().items():
                _install_name(module, f"{name}.{attr}", value)
            return module
        _finder.modules[name] = make
        return [name]
    if name in _finder.modules:
        return []
    module = importlib.import_module(name)
    new = []
    for attr, value in _pjit_names().items():
        if attr == "pjit":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                present = getattr(module, "pjit", None)
            if _is_ours(present, pmapkit.pjit) or (
                    present is not None and _is_classic_pjit(present)):
                continue
            module.pjit = value      # JAX's is jax.jit under another name
            new.append(f"{name}.pjit (classic)")
        else:
            new += _install_name(module, f"{name}.{attr}", value)
    return new


def _install_jax_export():
    name = "jax.experimental.jax2tf.jax_export"
    if _module_exists(name):
        return []
    new = []
    package = "jax.experimental.jax2tf"
    if package not in sys.modules and (
            not _module_exists(package)
            or importlib.util.find_spec("tensorflow") is None):
        # jax2tf imports TensorFlow (and absl) at once: without them the
        # package cannot be imported, and with it nor can its jax_export.
        _finder.modules[package] = _jax2tf_stand_in
        new.append(f"{package} (stand-in: TensorFlow absent)")
    _finder.modules[name] = _reported(name, "pmapkit.export")
    return new + [name]


def _jax2tf_stand_in():
    def missing(attr):
        raise AttributeError(
            f"jax.experimental.jax2tf.{attr} needs TensorFlow, which is not "
            "installed; pmapkit.legacy provides only "
            "jax.experimental.jax2tf.jax_export here")
    return legacy_names.stand_in_module(
        "jax.experimental.jax2tf", "Stand-in for jax2tf (TensorFlow is not "
        "installed): only jax_export, which is pmapkit.export.", missing)
