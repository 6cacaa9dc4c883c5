"""Collects the public names of a classic JAX release for the census.

    python -m pmapkit.legacy.census_collect VENV_PYTHON [VENV_PYTHON ...]
    python -m pmapkit.legacy.census_collect --out DIR VENV_PYTHON ...
    python -m pmapkit.legacy.census_collect --probe VENV_PYTHON --out DIR
    python -m pmapkit.legacy.census_collect --removals DIR [--gaps V1,V2]
    python -m pmapkit.legacy.census_collect --removals-added
    python -m pmapkit.legacy.census_collect --sources SDIST [SDIST ...]

Each ``VENV_PYTHON`` is the interpreter of a scratch virtual environment with
one classic jax/jaxlib installed. In it, every public module of the installed
package (each ``.py`` file outside private folders such as ``_src`` and
outside test and example folders; no fixed list) is imported and its
``dir()`` read, leaving out private names,
typing re-exports, the standard library's classes and functions, modules a
module merely imported (a package's submodules and ``jax.lib``'s jaxlib
modules stay), and names whose ``getattr`` already raises there (a release
lists some removed names in ``dir()`` through its deprecation hook). The
names are written, one ``module name`` pair a line, to ``pmapkit/legacy/census_data/jax-VERSION.txt`` (or ``--out DIR``),
and each module walked, with ``read`` or the error its import raised there, to
``walked.txt`` beside it.
``--probe`` writes which census names answer in a release (listed or not:
deprecated names reached through a module ``__getattr__`` count) and
``--removals DIR`` reads the releases probed into ``DIR`` (every installable
release from the census's first up to this JAX) and writes
``census_data/removed_in.txt``: the release that removed each census name
this JAX lacks.
``--removals-added`` adds the collected names ``removed_in.txt`` lacks
that this JAX does not answer (``removals_added``).
``--sources`` reads ``jax`` source distributions (``pip download --no-deps
--no-binary :all: jax==0.2.28``) of releases whose jaxlib no longer installs
(``pmapkit.legacy.census_sources``) and writes ``census_data/eras.txt``: the
public names of each release before the first collected one, with the
release that removed each name this JAX lacks (probed here, without
pmapkit) and the outside object a name re-exported; and
``census_data/modules.txt``: the releases whose sources have each public
module (sdists of later releases add their module facts only); and
``census_data/config.txt``: the ``jax_*`` config options each defines.
Nothing of pmapkit is imported in the classic environment: the collecting
code travels as source.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from pmapkit.legacy.census_sources import SKIP_PARTS

__all__ = ["SKIP_PARTS", "WALKED", "collect", "probe", "main"]

# Runs in the classic environment (as ``python -c``): prints one JSON object.
_COLLECTOR = r'''
import __future__, importlib, io, json, os, sys, types, typing, warnings, contextlib
warnings.simplefilter("ignore")
import jax
SKIP_PARTS = set(json.loads(sys.argv[1]))

def public(parts):
    """A module of the package's files that is public API: no part private
    (``_src``, ``_version``), no test or example folder, no ``*_test``."""
    return not any(p.startswith("_") or p in SKIP_PARTS for p in parts) \
        and not parts[-1].endswith("_test")

MODULES = []
ONLY = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
root = os.path.dirname(jax.__file__)
for folder, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
    inner = os.path.relpath(folder, os.path.dirname(root)).split(os.sep)
    for file in sorted(files):
        if not file.endswith(".py"):
            continue
        parts = inner if file == "__init__.py" else inner + [file[:-3]]
        if public(parts):
            MODULES.append(".".join(parts))
MODULES.sort()
if ONLY is not None:
    MODULES = [m for m in MODULES if m in ONLY]
TYPING = {"typing", "typing_extensions", "collections.abc", "abc"}

STDLIB = set(sys.stdlib_module_names) - {"__future__"}

def skipped(module, attr, value):
    if isinstance(value, (typing.TypeVar, __future__._Feature)):
        return True
    if isinstance(value, types.ModuleType):
        # A submodule, or jaxlib's modules re-exported by a package (jax.lib);
        # any other module bound in a module is an import of its code.
        if value.__name__ == f"{module.__name__}.{attr}":
            return False
        return not (hasattr(module, "__path__") and value.__name__.startswith("jaxlib."))
    if getattr(value, "__module__", None) in TYPING:
        return True
    if type(value).__module__ in ("typing", "typing_extensions"):
        return True
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        # functools.partial, collections.namedtuple, ...: the standard library's
        return (getattr(value, "__module__", None) or "").partition(".")[0] in STDLIB
    return False

found, missing = {}, {}
for name in MODULES:
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module = importlib.import_module(name)
    except BaseException as e:      # SystemExit of a script-like module too
        # the error's kind, and the module it could not find (tensorflow)
        missing[name] = type(e).__name__ + (f":{e.name}" if getattr(e, "name", None) else "")
        continue
    names = []
    for attr in dir(module):
        if attr.startswith("_"):
            continue
        try:
            value = getattr(module, attr)
        except Exception:
            continue
        if not skipped(module, attr, value):
            names.append(attr)
    found[name] = names
print(json.dumps({"version": jax.__version__, "modules": found, "missing": missing}))
'''

# Runs in the classic environment: which of the given pairs answer there
# (listed or not: a deprecated name reached through a module __getattr__
# still answers until its deprecation raises).
_PROBE = r'''
import importlib, io, json, sys, warnings, contextlib
warnings.simplefilter("ignore")
pairs = json.loads(sys.stdin.read())
found = {}
for module_name, names in pairs.items():
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module = importlib.import_module(module_name)
    except Exception:
        continue
    have = []
    for attr in names:
        try:
            getattr(module, attr)
        except Exception:
            try:
                importlib.import_module(f"{module_name}.{attr}")
            except Exception:
                continue
        have.append(attr)
    found[module_name] = have
import jax
print(json.dumps({"version": jax.__version__, "modules": found, "missing": []}))
'''


def probe(python: str, pairs) -> dict:
    """Like ``collect``, but the names are ``pairs`` (module, name), each
    kept where it answers in the environment of ``python``."""
    by_module = {}
    for module, name in pairs:
        by_module.setdefault(module, []).append(name)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([python, "-I", "-c", _PROBE], input=json.dumps(by_module),
                          capture_output=True, text=True, env=env, timeout=900,
                          cwd=os.path.dirname(os.path.abspath(python)))
    if proc.returncode != 0:
        raise RuntimeError(f"probing with {python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])




def collect(python: str) -> dict:
    """``{"version", "modules": {module: [names]}, "missing": {module: the
    error its import raised}}`` of the JAX installed for interpreter
    ``python``: every public module of the installed package is read (its
    ``.py`` files not under a private folder such as ``_src``, nor a test or
    example one)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([python, "-I", "-c", _COLLECTOR, json.dumps(SKIP_PARTS)],
                          capture_output=True, text=True, env=env, timeout=900,
                          cwd=os.path.dirname(os.path.abspath(python)))
    if proc.returncode != 0:
        raise RuntimeError(f"collecting with {python} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # A module whose import failed after the others is read again alone, in
    # a fresh interpreter: an earlier module's failed import can leave a
    # package half-initialised (0.4.13's jax.scipy.linalg then misses tril).
    for module in sorted(result["missing"]):
        alone = subprocess.run([python, "-I", "-c", _COLLECTOR, json.dumps(SKIP_PARTS),
                                json.dumps([module])], capture_output=True, text=True,
                               env=env, timeout=900, cwd=os.path.dirname(os.path.abspath(python)))
        if alone.returncode == 0:
            again = json.loads(alone.stdout.strip().splitlines()[-1])
            if module in again["modules"]:
                result["modules"][module] = again["modules"][module]
                del result["missing"][module]
            else:
                result["missing"][module] = again["missing"].get(module, result["missing"][module])
    return result


def _write(result: dict, out_dir: str) -> str:
    path = os.path.join(out_dir, f"jax-{result['version']}.txt")
    lines = sorted(f"{module} {name}" for module, names in result["modules"].items()
                   for name in names)
    with open(path, "w") as f:
        f.write(f"# public names of jax {result['version']}: "
                "python -m pmapkit.legacy.census_collect\n")
        f.write("\n".join(lines) + "\n")
    if isinstance(result.get("missing"), dict):
        _write_walked(result, out_dir)
    return path


WALKED = "walked.txt"


def _write_walked(result, out_dir):
    """Records in ``walked.txt`` which modules the release's package has and
    how each was read (``read``, or the error its import raised there),
    replacing that release's lines only."""
    path = os.path.join(out_dir, WALKED)
    version = result["version"]
    kept = []
    if os.path.exists(path):
        with open(path) as f:
            kept = [line.rstrip("\n") for line in f
                    if line.strip() and line[0] != "#" and line.split()[0] != version]
    outcome = {m: "read" for m in result["modules"]}
    outcome.update(result["missing"])
    kept += [f"{version} {module} {outcome[module]}" for module in sorted(outcome)]
    kept.sort(key=lambda line: (_version_key(line.split()[0]), line.split()[1]))
    with open(path, "w") as f:
        f.write("# the public modules of each collected release's installed package (its "
                ".py files outside private, test and example folders) and how each was "
                "read: 'read', or the error its import raised there: python -m "
                "pmapkit.legacy.census_collect\n")
        f.write("\n".join(kept) + "\n")


def _names(path):
    with open(path) as f:
        return {".".join(line.split()) for line in f if line.strip() and line[0] != "#"}


def removals(releases_dir: str, out_dir: str, gaps=()) -> str:
    """Writes ``removed_in.txt``: for each name of the census (``out_dir``)
    missing from the newest release probed in ``releases_dir``, the release
    after its last appearance there. ``gaps``: releases between them that
    could not be installed; a name that went across one gets the window
    "FIRST-GAP..FIRST-WITHOUT"."""
    import re
    found = {}
    for folder in (releases_dir,):
        for entry in os.listdir(folder):
            match = re.fullmatch(r"jax-(\d+(?:\.\d+)+)\.txt", entry)
            if match:
                found[match.group(1)] = _names(os.path.join(folder, entry))
    def key(v):
        return tuple(int(p) for p in v.split("."))
    order = sorted(found, key=key)
    everything = sorted(set(order) | set(gaps), key=key)
    census = set().union(*(_names(os.path.join(out_dir, e)) for e in os.listdir(out_dir)
                           if e.startswith("jax-")))
    newest = found[order[-1]]
    lines = []
    for name in sorted(census - newest):
        present = [i for i, v in enumerate(order) if name in found[v]]
        if not present:
            continue        # never answered in a probed release: no claim
        first_without = order[present[-1] + 1]
        after = everything[everything.index(order[present[-1]]) + 1]
        window = first_without if after == first_without else f"{after}..{first_without}"
        lines.append(f"{name} {window}")
    path = os.path.join(out_dir, "removed_in.txt")
    with open(path, "w") as f:
        f.write(f"# the release that removed each name: the first of {len(order)} probed "
                f"releases ({order[0]} to {order[-1]}) where it no longer answers; "
                f"A..B where releases A.. before B could not be installed "
                f"({', '.join(gaps) or 'none'}). python -m "
                "pmapkit.legacy.census_collect --removals DIR --gaps A,B\n")
        f.write("\n".join(lines) + "\n")
    return path


def removals_added(out_dir: str) -> str:
    """Adds to ``removed_in.txt`` the collected names it lacks (names of
    modules the walk reads that the fixed list did not) that do not answer
    on this JAX (probed here, without pmapkit): each with the window
    between the last collected release that has it and the next collected
    one (or this JAX) -- the collected releases alone, not every
    installable one as ``--removals`` probes. Returns the file's path."""
    path = os.path.join(out_dir, "removed_in.txt")
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    known = {line.split()[0] for line in lines if line[0] != "#"}
    found = {}
    for entry in os.listdir(out_dir):
        if entry.startswith("jax-") and entry.endswith(".txt"):
            found[entry[4:-4]] = _names(os.path.join(out_dir, entry))
    order = sorted(found, key=_version_key)
    candidates = sorted(set().union(*found.values()) - known)
    pairs = [tuple(name.rsplit(".", 1)) for name in candidates]
    answers = probe(sys.executable, pairs)["modules"]
    here = {f"{m}.{n}" for m, names in answers.items() for n in names}
    import jax
    every = sorted(set(_all_releases(sys.executable)) | set(order) | {jax.__version__},
                   key=_version_key)
    from pmapkit.legacy.census import _probe
    added = []
    for name in candidates:
        if name in here or _probe(*name.rsplit(".", 1))[0]:
            # answers here, or its module is this JAX's and needs a package
            # outside JAX (TensorFlow, tensorstore, xprof): not removed
            continue
        last = max((v for v in order if name in found[v]), key=_version_key)
        later = [v for v in order if _version_key(v) > _version_key(last)]
        first_without = later[0] if later else jax.__version__
        after = every[every.index(last) + 1]
        added.append(f"{name} {first_without if after == first_without else f'{after}..{first_without}'}")
    marker = ("# added by --removals-added: the window between the collected releases "
              f"({', '.join(order)}) and this JAX ({jax.__version__}) only")
    if added:
        if marker not in lines:
            lines.append(marker)
        lines += added
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _version_key(v):
    return tuple(int(p) for p in v.split("."))


def _all_releases(python):
    """Every jax release on the package index, oldest first (the windows of
    removals between read releases); the read ones where the index cannot
    be asked."""
    proc = subprocess.run([python, "-m", "pip", "index", "versions", "jax"],
                          capture_output=True, text=True, timeout=300)
    for line in proc.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            found = [v.strip() for v in line.partition(":")[2].split(",")]
            return sorted((v for v in found if v.replace(".", "").isdigit()),
                          key=_version_key)
    return []


def _spans(indices):
    runs, start = [], None
    for i in indices:
        if start is None or i != prev + 1:
            if start is not None:
                runs.append((start, prev))
            start = i
        prev = i
    runs.append((start, prev))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def sources(sdists, out_dir):
    """Writes ``eras.txt`` and ``modules.txt`` from ``sdists`` (see the
    module docstring); returns their paths."""
    from pmapkit.legacy import census, census_sources
    first_collected = census.COLLECTED[0]
    read, options = {}, {}
    for path in sdists:
        version, modules = census_sources.release_modules(path)
        read[version] = modules
        options[version] = census_sources.config_options(path)[1]
    order = sorted(read, key=_version_key)
    eras = [v for v in order if _version_key(v) < _version_key(first_collected)]
    pairs, origins = {}, {}
    for i, version in enumerate(eras):
        for module, names in read[version].items():
            for name, origin in names.items():
                pairs.setdefault((module, name), []).append(i)
                if origin:
                    origins[(module, name)] = origin
    collected = {p for r in census.COLLECTED for p in census.collected_names(r)}
    unknown = [p for p in pairs if p not in collected]
    here = probe(sys.executable, unknown)["modules"]
    answers = {(m, n) for m, names in here.items() for n in names}
    # a module this JAX has that needs a package outside JAX (TensorFlow,
    # tensorstore, xprof) does not import in the probe: not removed
    from pmapkit.legacy.census import _probe
    answers |= {p for p in unknown if p not in answers and _probe(*p)[0]}
    every = _all_releases(sys.executable) or order
    everything = sorted(set(every) | set(order) | set(census.COLLECTED), key=_version_key)

    def window(last, first_without):
        """The releases that may have removed what ``last`` still had:
        ``first_without`` itself when no release lies between."""
        after = everything[everything.index(last) + 1]
        if first_without is None:      # read releases end with it still there
            return f"{after}..{everything[-1]}"
        return first_without if after == first_without else f"{after}..{first_without}"

    def names_of(version):
        return {(m, n) for m, names in read[version].items() for n in names}

    present = {v: names_of(v) for v in order}
    lines = []
    for pair in sorted(pairs):
        have = pairs[pair]
        removed = "-"
        if pair not in collected and pair not in answers:
            # the last read release with it (later sources count too: the
            # collected census lists a module's dir(), not its files)
            last = max((v for v in order if pair in present[v]), key=_version_key)
            later_reads = order[order.index(last) + 1:]
            removed = window(last, later_reads[0] if later_reads else None)
        origin = origins.get(pair, "")
        lines.append(f"{pair[0]} {pair[1]} {_spans(have)} {removed} {origin}".rstrip())
    eras_path = os.path.join(out_dir, "eras.txt")
    with open(eras_path, "w") as f:
        f.write("# public names of jax releases read from their sources "
                "(pmapkit.legacy.census_sources): python -m pmapkit.legacy.census_collect "
                "--sources SDIST...\n")
        f.write("# columns: module name releases (indices into the list below) removed_in "
                "('-': this JAX has it, or the collected census says) [origin: the outside "
                "object it re-exported]\n")
        f.write("releases " + " ".join(eras) + "\n")
        f.write("\n".join(lines) + "\n")
    modules_path = os.path.join(out_dir, "modules.txt")
    with open(modules_path, "w") as f:
        f.write("# the read releases whose sources have each public module: python -m "
                "pmapkit.legacy.census_collect --sources SDIST...\n")
        f.write("releases " + " ".join(order) + "\n")
        for module in sorted({m for v in order for m in read[v]}):
            have = [i for i, v in enumerate(order) if module in read[v]]
            gone = "-" if have[-1] == len(order) - 1 else window(
                order[have[-1]], order[have[-1] + 1])
            f.write(f"{module} {_spans(have)} {gone}\n")
    import jax
    config_path = os.path.join(out_dir, "config.txt")
    with open(config_path, "w") as f:
        f.write("# the read releases whose sources define each jax_* config option "
                "(indices into the list below), and the release that removed it ('-': "
                "this JAX has it): python -m pmapkit.legacy.census_collect --sources "
                "SDIST...\n")
        f.write("releases " + " ".join(order) + "\n")
        for option in sorted(set().union(*options.values())):
            have = [i for i, v in enumerate(order) if option in options[v]]
            if option in jax.config.values:
                gone = "-"
            else:
                later = order[have[-1] + 1:]
                gone = window(order[have[-1]], later[0] if later else None)
            f.write(f"{option} {_spans(have)} {gone}\n")
    return eras_path, modules_path, config_path


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "census_data")
    if argv[:1] == ["--sources"]:
        missing = [p for p in argv[1:] if not os.path.isfile(p)]
        if len(argv) < 2 or missing:
            print("census_collect: --sources needs jax sdist files"
                  + (f"; no file {missing[0]!r}" if missing else ""), file=sys.stderr)
            return 2
        for path in sources(argv[1:], out_dir):
            print(path)
        return 0
    if argv[:1] == ["--removals"] and len(argv) in (2, 4) and argv[2:3] in ([], ["--gaps"]):
        gaps = argv[3].split(",") if len(argv) == 4 else ()
        print(removals(argv[1], out_dir, gaps))
        return 0
    if argv[:1] == ["--removals-added"]:
        print(removals_added(out_dir))
        return 0
    if argv[:1] == ["--probe"]:
        if len(argv) < 4 or argv[2] != "--out":
            print("usage: census_collect --probe VENV_PYTHON --out DIR", file=sys.stderr)
            return 2
        from pmapkit.legacy import census
        result = probe(argv[1], census.union())
        os.makedirs(argv[3], exist_ok=True)
        print(_write(result, argv[3]))
        return 0
    if argv[:1] == ["--out"]:
        if len(argv) < 2:
            print("census_collect: --out needs a directory", file=sys.stderr)
            return 2
        out_dir, argv = argv[1], argv[2:]
    if not argv:
        print("usage: " + __doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    os.makedirs(out_dir, exist_ok=True)
    for python in argv:
        if not os.path.exists(python):
            print(f"census_collect: no interpreter at {python!r}", file=sys.stderr)
            return 2
        result = collect(python)
        path = _write(result, out_dir)
        count = sum(len(v) for v in result["modules"].values())
        print(f"jax {result['version']}: {count} names in {len(result['modules'])} "
              f"modules -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
