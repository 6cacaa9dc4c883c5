"""The census data: the public names of classic JAX releases, and how each
answers on this JAX.

``pmapkit/legacy/census_data/jax-VERSION.txt`` (package data, written by
``python -m pmapkit.legacy.census_collect``) lists one ``module name`` pair a
line: the releases whose jaxlib installs here, collected by running them
(``COLLECTED``). ``census_data/eras.txt`` holds the older releases (0.1 to
0.4.12, ``ERAS``), read from their sources (``census_collect --sources``),
with the release that removed each name and the outside object a name
re-exported (``origin``); ``census_data/modules.txt`` the releases whose
sources have each public module. ``RELEASES`` is both, oldest first.
``classify`` holds each pair against the running JAX:

- ``native``: this JAX has it (before ``pmapkit.legacy.install()``);
- ``served``: it works once pmapkit.legacy is installed;
- ``clear``: it raises an error naming it, the release that removed it and
  what to use instead;
- ``plain``: anything else (a bare ``AttributeError``/``ImportError``).

``python -m pmapkit.legacy.census_check`` prints the counts per release.
"""
from __future__ import annotations

import functools
import importlib
import os
import re
import typing
import warnings

__all__ = ["RELEASES", "COLLECTED", "ERAS", "TARGET_RELEASE", "release_names", "union", "history",
           "removed_in", "module_removed_in", "config_removed_in", "origin", "classify", "clear_error", "counts",
           "OUTCOMES", "public_homes", "real_use_missing", "RealUse", "RealUseSource", "real_use", "real_use_sources"]

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "census_data")


@functools.lru_cache(maxsize=None)
def _version_key(version):
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _releases():
    found = []
    for entry in os.listdir(_DATA):
        match = re.fullmatch(r"jax-(\d+(?:\.\d+)+)\.txt", entry)
        if match:
            found.append(match.group(1))
    return tuple(sorted(found, key=_version_key))


def _spans(text):
    """The indices of ``"0-3,5"``."""
    out = []
    for run in text.split(","):
        first, _, last = run.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


@functools.lru_cache(maxsize=None)
def _eras():
    """``(releases, {pair: (release indices, removed_in or None, origin or
    None)})`` of ``eras.txt``."""
    path = os.path.join(_DATA, "eras.txt")
    if not os.path.exists(path):
        return (), {}
    releases, pairs = (), {}
    with open(path) as f:
        for line in f:
            if not line.strip() or line[0] == "#":
                continue
            fields = line.split()
            if fields[0] == "releases":
                releases = tuple(fields[1:])
                continue
            module, name, spans, removed = fields[:4]
            pairs[(module, name)] = (_spans(spans), None if removed == "-" else removed,
                                     fields[4] if len(fields) > 4 else None)
    return releases, pairs


COLLECTED = _releases()
ERAS = _eras()[0]
RELEASES = tuple(sorted(COLLECTED + ERAS, key=_version_key))

#: The JAX release the census holds the names against (``removed_in.txt`` was
#: written on it): a classic name it lacks, with no removal the census read,
#: went in this release at the latest.
TARGET_RELEASE = "0.10.0"


@functools.lru_cache(maxsize=None)
def release_names(release: str) -> tuple[tuple[str, str], ...]:
    """The ``(module, name)`` pairs of a release of the census, sorted."""
    if release not in RELEASES:
        raise ValueError(f"release must be one of {', '.join(RELEASES)}; got {release!r}")
    if release in ERAS:
        index = ERAS.index(release)
        return tuple(sorted(p for p, (have, _, _) in _eras()[1].items() if index in have))
    return collected_names(release)


@functools.lru_cache(maxsize=None)
def collected_names(release: str) -> tuple[tuple[str, str], ...]:
    """The ``(module, name)`` pairs of a collected release (``COLLECTED``)."""
    if release not in COLLECTED:
        raise ValueError(f"release must be one of {', '.join(COLLECTED)}; got {release!r}")
    pairs = []
    with open(os.path.join(_DATA, f"jax-{release}.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                module, name = line.split()
                pairs.append((module, name))
    return tuple(pairs)


@functools.lru_cache(maxsize=None)
def union() -> tuple[tuple[str, str], ...]:
    """Every pair of every release of the census, sorted."""
    pairs = {p for r in COLLECTED for p in collected_names(r)}
    pairs.update(_eras()[1])
    return tuple(sorted(pairs))


@functools.lru_cache(maxsize=None)
def history() -> dict[str, tuple[str, ...]]:
    """``{"module.name": releases that have it}`` over the census's releases,
    oldest first."""
    seen = {}
    for (module, name), (have, _, _) in _eras()[1].items():
        seen[f"{module}.{name}"] = [ERAS[i] for i in have]
    for release in COLLECTED:
        for module, name in collected_names(release):
            seen.setdefault(f"{module}.{name}", []).append(release)
    return {k: tuple(v) for k, v in seen.items()}


def origin(full_name: str) -> str | None:
    """The object outside JAX that a classic release's name re-exported
    (``"functools.partial"`` for ``jax.partial``), else None."""
    module, _, name = full_name.rpartition(".")
    found = _eras()[1].get((module, name))
    return found[2] if found else None


@functools.lru_cache(maxsize=None)
def _module_facts():
    """``{module: release that removed its file, or None}`` of modules.txt."""
    path = os.path.join(_DATA, "modules.txt")
    if not os.path.exists(path):
        return {}
    facts = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields or line[0] == "#" or fields[0] == "releases":
                continue
            facts[fields[0]] = None if fields[2] == "-" else fields[2]
    return facts


def module_removed_in(module: str) -> str | None:
    """The release that removed the sources of ``module`` (the module
    itself: ``jax.config`` the module went in 0.4.29 while ``jax.config``
    the attribute stays), a window "A..B" where releases between the read
    ones were not read; None where the last read release has it or it was
    never read."""
    return _module_facts().get(module)


def removal_window(full_name: str) -> tuple[str, str | None] | None:
    """``(last release with it, first release of the census after that
    without it or None)`` for a census name; None for one never seen."""
    have = history().get(full_name)
    if not have:
        return None
    last = have[-1]
    later = [r for r in RELEASES if _version_key(r) > _version_key(last)]
    return last, (later[0] if later else None)


@functools.lru_cache(maxsize=None)
def config_options() -> dict[str, str | None]:
    """``{jax_* option: the release that removed it, or None}`` of the
    options the read releases defined (``census_data/config.txt``)."""
    path = os.path.join(_DATA, "config.txt")
    if not os.path.exists(path):
        return {}
    found = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields or line[0] == "#" or fields[0] == "releases":
                continue
            found[fields[0]] = None if fields[2] == "-" else fields[2]
    return found


def config_removed_in(option: str) -> str | None:
    """The release that removed config option ``option`` (a window "A..B"
    between read releases), None where this JAX has it or none read did."""
    return config_options().get(option)


@functools.lru_cache(maxsize=None)
def _removals():
    path = os.path.join(_DATA, "removed_in.txt")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        found = dict(line.split() for line in f if line.strip() and line[0] != "#")
    for (module, name), (_, removed, _) in _eras()[1].items():
        if removed:
            found.setdefault(f"{module}.{name}", removed)
    return found


def missing_here(full_name: str) -> bool:
    """Whether JAX 0.10 lacks a census name (it is in ``removed_in.txt``);
    without that file, every name is taken as possibly missing."""
    removals = _removals()
    return not removals or full_name in removals


def removed_in(full_name: str) -> str | None:
    """The JAX release that removed a census name (the first release without
    it: ``census_data/removed_in.txt``), else the census window it went in
    ("after 0.6.2, by 0.9.2"); None for a name the census never saw."""
    exact = _removals().get(full_name)
    if exact and ".." in exact:
        # a window across releases whose jaxlib does not install: a module's
        # sources (modules.txt) may name the very release
        narrowed = module_removed_in(full_name)
        low, _, high = exact.partition("..")
        if narrowed and ".." not in narrowed and \
                _version_key(low) <= _version_key(narrowed) <= _version_key(high):
            return narrowed
    if exact:
        return exact
    window = removal_window(full_name)
    if window is None:
        return None
    last, first_without = window
    return f"after {last}" + (f", by {first_without}" if first_without else "")


@functools.lru_cache(maxsize=None)
def real_use_missing() -> frozenset:
    """Names of the census of real use this JAX lacks whose module it still
    has, outside the release census (``census_data/real_use_missing.txt``,
    written by ``python -m pmapkit.legacy.census_check --write-missing``)."""
    path = os.path.join(_DATA, "real_use_missing.txt")
    if not os.path.exists(path):
        return frozenset()
    with open(path) as f:
        return frozenset(line.strip() for line in f if line.strip() and line[0] != "#")


@functools.lru_cache(maxsize=None)
def public_homes() -> dict[str, str]:
    """``{classic name: public name}`` for census names whose object JAX
    still exports publicly under another name (``census_data/public_homes.txt``,
    written by ``python -m pmapkit.legacy.census_public_homes``)."""
    path = os.path.join(_DATA, "public_homes.txt")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return dict(line.split() for line in f if line.strip() and line[0] != "#")


# -- the census of real use ----------------------------------------------------

class RealUseSource(typing.NamedTuple):
    """One repository read at one commit (``census_data/real_use.tsv``)."""
    repository: str      # OWNER/NAME
    commit: str
    date: str            # the commit's date, YYYY-MM-DD


class RealUse(typing.NamedTuple):
    """One dotted name public code reaches: its kind (``module``, ``name``,
    ``config_attr``, ``config_option``, ``array_member``, ``jaxlib_class``),
    how many repositories reach it, and which sources (indices into
    ``real_use_sources()``)."""
    name: str
    kind: str
    repos: int
    repo_ids: tuple

    def repositories(self):
        """The OWNER/NAME of each repository reaching it, sorted."""
        sources = real_use_sources()
        return tuple(sorted({sources[i].repository for i in self.repo_ids}))


@functools.lru_cache(maxsize=None)
def _real_use():
    path = os.path.join(_DATA, "real_use.tsv")
    sources, rows = [], []
    with open(path) as f:
        for line in f:
            if not line.strip() or line[0] == "#":
                continue
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "source":
                sources.append(RealUseSource(*fields[2:5]))
            elif fields[0] != "name":
                name, kind, repos, ids = fields
                rows.append(RealUse(name, kind, int(repos), tuple(_spans(ids))))
    return tuple(sources), tuple(rows)


def real_use_sources() -> tuple[RealUseSource, ...]:
    """The repositories and commits the census of real use read, in the
    order ``RealUse.repo_ids`` index."""
    return _real_use()[0]


def real_use(min_repos: int = 1) -> tuple[RealUse, ...]:
    """The census of real use (``census_data/real_use.tsv``, written by
    ``python -m pmapkit.legacy.census_real_use``): every ``jax.*`` /
    ``jaxlib.*`` name public code of 2019-2024 reaches, most used first;
    those reached by at least ``min_repos`` repositories. The one reader of
    that table (``pmapkit run --report``, migrate's leftover scan and
    ``census_check`` all read it here)."""
    rows = _real_use()[1]
    return rows if min_repos <= 1 else tuple(r for r in rows if r.repos >= min_repos)


_RELEASE = re.compile(r"JAX (v?\d+\.\d+|after \d+\.\d+)")


def clear_error(error: BaseException, full_name: str) -> bool:
    """Whether ``error`` names ``full_name`` (or the module holding it), a
    JAX release that removed it, and what to use instead."""
    text = str(error)
    if isinstance(error, ModuleNotFoundError) and full_name in text \
            and " needs " in text and "pip install " in text:
        # Served, but on a package classic JAX needed for it too (absl-py for
        # jax.test_util): the error names the name and the install.
        return True
    # the name itself, or a removed module that held it (a name of
    # jax.experimental.array_api.fft is refused by its package's import)
    owners = [full_name.rsplit(".", k)[0] for k in range(1, full_name.count("."))]
    named = full_name in text or any(f"{owner} was removed" in text for owner in owners)
    says_what = ("instead" in text or "no public replacement" in text
                 or "use " in text.lower())
    return bool(named and _RELEASE.search(text) and "removed" in text and says_what)


def _file_spec(name):
    """The spec of module ``name`` found from the files alone (no package
    above it imported), or None: whether this JAX has the module's file."""
    import importlib.machinery
    parts = name.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0])
    for k in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:k + 1]),
                                                       spec.submodule_search_locations)
    return spec


def _outside_package(module_name, error):
    """Whether importing ``module_name`` failed while this JAX has the
    module's file: it needs a package outside JAX (TensorFlow for jax2tf,
    tensorstore, xprof). JAX's name all the same; the program brings the
    package."""
    if not isinstance(error, ImportError) or _file_spec(module_name) is None:
        return False
    return not (isinstance(error, ModuleNotFoundError) and error.name == module_name)


def _probe(module_name, name):
    """``(True, None)`` when ``module.name`` is reachable (or its module is
    this JAX's but needs a package outside JAX), else ``(False, error)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:      # every failure is classified, none escapes
            return (True, None) if _outside_package(module_name, e) else (False, e)
        try:
            getattr(module, name)
        except Exception as e:      # a submodule read as an attribute too
            if _outside_package(f"{module_name}.{name}", e):
                return True, None
            return False, e
    return True, None


def classify(pairs, install=None) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(module, name): (outcome, error text)}`` for ``pairs`` on this JAX;
    ``install`` (e.g. ``pmapkit.legacy.install``) runs after the native probe."""
    native = {p: _probe(*p) for p in pairs}
    if install is not None:
        install()
    out = {}
    for pair, (ok, _) in native.items():
        if ok:
            out[pair] = ("native", "")
            continue
        ok, error = _probe(*pair) if install else native[pair]
        if ok:
            out[pair] = ("served", "")
        elif clear_error(error, ".".join(pair)):
            out[pair] = ("clear", str(error))
        else:
            out[pair] = ("plain", f"{type(error).__name__}: {error}")
    return out


OUTCOMES = ("native", "served", "clear", "plain")


def counts(outcomes, release):
    tally = dict.fromkeys(OUTCOMES, 0)
    for pair in release_names(release):
        tally[outcomes[pair][0]] += 1
    return tally
