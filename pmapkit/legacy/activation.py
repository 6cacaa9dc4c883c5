"""The classic layer turned on for a whole process tree (``pmapkit run``,
``%load_ext pmapkit``).

Activating does two things:

* in this process it arms a hook that installs the classic layer
  (``pmapkit.legacy.install``) right after ``jax``'s own ``__init__`` has run,
  or at once where jax is imported already: a process that never imports jax
  never does, and arming costs a meta-path entry;
* for every Python process started below it, it puts the options in the
  environment variable ``PMAPKIT_RUN`` (JSON) and the folder holding
  pmapkit's ``sitecustomize`` first on ``PYTHONPATH``. Python imports that
  ``sitecustomize`` at start-up (as ``opentelemetry-instrument`` reaches a
  process tree; ``coverage``'s process-start hook is the same idea keyed by
  ``COVERAGE_PROCESS_START``), and it arms the same hook. Spawn and
  forkserver workers, ``ProcessPoolExecutor``, a child ``sys.executable``, a
  ``python -m pytest`` or ``pytest`` a script starts, and their children, all
  run with the layer; forked children inherit it installed. A process started
  with ``-S``, ``-E`` or ``-I`` (no site, no environment) runs without it, as
  it would run without coverage.

Only the top process announces the layer on stderr; with ``--report``,
workers write what they counted into a folder the top process made, and the
top process prints one report for the tree at exit.

This module imports only the standard library: ``sitecustomize`` imports it
in every process of the tree.
"""
from __future__ import annotations

import importlib.abc
import json
import os
import sys

from pmapkit.legacy.run_options import report_form_from_environment

__all__ = ["ENV", "SITE_DIR", "activate", "start_from_environment", "options"]

#: The environment variable that carries the options down the process tree.
ENV = "PMAPKIT_RUN"
#: The folder put first on ``PYTHONPATH``: it holds only ``sitecustomize.py``.
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "activation_site")

_armed = None      # this process's options, once armed


def options():
    """The options this process was activated with (a dict), or None."""
    return None if _armed is None else dict(_armed)


def activate(route_pmap: bool = False, report=None, classic_prng: bool = True) -> None:
    """Turns the classic layer on for this process and every Python process
    it starts from now on. ``route_pmap``, ``report`` (None: as
    ``PMAPKIT_REPORT`` says) and ``classic_prng`` are ``install``'s options
    (``pmapkit run``'s ``--route-pmap``, ``--report``, ``--modern-prng``).
    The layer itself is installed when jax is imported (now, if it is)."""
    if report is None:
        report = report_form_from_environment()
    opts = {"route_pmap": bool(route_pmap), "report": report,
            "classic_prng": bool(classic_prng), "report_dir": None}
    if report:
        import atexit
        import tempfile
        # Workers count into files here; this process merges them at exit.
        opts["report_dir"] = tempfile.mkdtemp(prefix="pmapkit-report-")
        atexit.register(_report_for_the_tree, opts["report_dir"], report)
    os.environ[ENV] = json.dumps(opts)
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if SITE_DIR not in entries:
        os.environ["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *entries])
    _arm(opts, top=True)


def start_from_environment() -> None:
    """What pmapkit's ``sitecustomize`` runs at interpreter start: arm the
    hook with the options ``PMAPKIT_RUN`` carries, if any."""
    text = os.environ.get(ENV)
    if not text or _armed is not None:
        return
    try:
        opts = json.loads(text)
    except ValueError:
        print(f"pmapkit: ignoring {ENV}={text[:80]!r}: not the JSON pmapkit run writes",
              file=sys.stderr)
        return
    if not isinstance(opts, dict):
        return
    _arm(opts, top=False)


def _arm(opts, top):
    global _armed
    _armed = dict(opts, top=top)
    jax = sys.modules.get("jax")
    if jax is not None and not _initializing(jax):
        _install(_armed)
        return
    if not any(isinstance(f, _JaxWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _JaxWatcher())


def _initializing(module):
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _install(opts):
    from pmapkit.legacy import _installer, report
    if opts.get("report") and opts.get("report_dir"):
        report.join_tree(opts["report_dir"], top=opts.get("top", False))
    _installer.install(route_pmap=opts.get("route_pmap", False),
                       report=opts.get("report") or False,
                       classic_prng=opts.get("classic_prng", True),
                       announce=opts.get("top", False))


class _JaxWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``jax`` is about to be imported it asks the
    finders after it for jax's spec and wraps its loader, so the classic
    layer is installed once jax's ``__init__`` has run (before the
    ``import jax`` statement returns)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "jax":
            return None
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = _InstallAfter(spec.loader)
        return spec


class _InstallAfter(importlib.abc.Loader):
    """jax's own loader, then the classic layer."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):     # get_filename, is_package, resource readers
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        # jax's module names its own loader, as an import without us would.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        try:
            _install(_armed)
        except Exception as exc:   # jax is imported; the program goes on, told why
            print(f"pmapkit: the classic layer could not be installed in this process "
                  f"({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)


def _report_for_the_tree(folder, form):
    """At the top process's exit: one report of what this process and every
    worker counted (workers wrote theirs into ``folder``)."""
    import shutil
    try:
        written = os.listdir(folder)
    except OSError:
        written = []
    try:
        if written or "pmapkit.legacy.report" in sys.modules:
            from pmapkit.legacy import report
            report.print_tree_report(folder, form)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
