"""``python -m pmapkit.legacy.census_check [--json] [--no-install]
[--real-use]``: the census (``pmapkit.legacy.census``) held against this
JAX, after ``pmapkit.legacy.install()`` (``--no-install``: before). Prints
the counts per release: native, served by pmapkit, clear error, plain
error; then the same for the census of real use (``census.real_use()``),
all its names and those two or more repositories reach (``--real-use``:
each of those that is not native, with its outcome). ``--json``: the counts
and every pair and real-use name not native, with its outcome and error
text. ``--write-missing``: writes ``census_data/real_use_missing.txt``
(``write_missing``).

A real-use name is probed as classic code used it: a dotted name resolves
(the longest prefix that imports, then attributes); a ``config_attr`` or
``config_option`` is one ``jax.config`` knows (``jax.config.values``) or
reads; an ``array_member`` is read
from a ``jax.Array`` (``jax.Array.device`` is called, as classic
``x.device()`` was). A module that needs a package outside JAX (jax2tf and
TensorFlow) counts as JAX's.
"""
from __future__ import annotations

import importlib
import json
import sys
import warnings

from pmapkit.legacy.census import (OUTCOMES, RELEASES, classify, clear_error, counts,
                                   real_use, union)
from pmapkit.legacy.names import RemovedFromJax

__all__ = ["main", "probe_real_use", "classify_real_use"]


def _resolve(name):
    """The object the dotted ``name`` reaches on this JAX: the longest
    prefix that imports as a module, then attributes. A module that needs
    a package outside JAX (jax2tf needs TensorFlow) raises
    ``_NeedsAnotherPackage``."""
    parts = name.split(".")
    obj = None
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and e.name.partition(".")[0] not in ("jax", "jaxlib"):
                raise _NeedsAnotherPackage(e.name) from e
            continue
        except ImportError:
            if cut == 1 or ".".join(parts[:cut - 1]) in sys.modules:
                raise
            continue
        break
    for attr in parts[cut:]:
        obj = getattr(obj, attr)
    return obj


class _NeedsAnotherPackage(Exception):
    pass


def _array_probe():
    import jax
    import numpy as np
    return jax.device_put(np.zeros(3, np.float32))


def probe_real_use(record):
    """``(True, None)`` when the real-use ``record`` works on this JAX as
    classic code used it, else ``(False, error)``: a name resolves; a
    config attribute or option reads from ``jax.config``; an array member
    reads from a ``jax.Array`` (``device``: is called, as classic
    ``x.device()`` was)."""
    import jax
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if record.kind == "config_attr":
                getattr(jax.config, record.name.rpartition(".")[2])
            elif record.kind == "config_option":
                option = record.name.partition(":")[2]
                if option not in jax.config.values:    # given to update, or read
                    getattr(jax.config, option)
            elif record.kind == "array_member":
                value = getattr(_array_probe(), record.name.rpartition(".")[2])
                if record.name == "jax.Array.device":
                    value()
            else:
                _resolve(record.name)
        except _NeedsAnotherPackage:
            return True, None       # JAX has it; the program brings the package
        except ModuleNotFoundError as e:
            if e.name and e.name.partition(".")[0] not in ("jax", "jaxlib"):
                return True, None   # served; it needs a package outside JAX (absl-py)
            return False, e
        except Exception as e:      # every failure is classified, none escapes
            return False, e
    return True, None


def classify_real_use(records, install=None, native=None):
    """``{name: (outcome, error text)}`` of real-use ``records`` on this JAX
    (``OUTCOMES``); ``install`` runs after the native probe (``native``:
    ``{name: probe_real_use(record)}`` taken before an install already done)."""
    if native is None:
        native = {r.name: probe_real_use(r) for r in records}
    if install is not None:
        install()
    out = {}
    for record in records:
        ok, error = native[record.name]
        if ok:
            out[record.name] = ("native", "")
            continue
        if install is not None or native is not None:
            ok, error = probe_real_use(record)
        if ok:
            out[record.name] = ("served", "")
        elif _clear_refusal(error, record.name):
            out[record.name] = ("clear", str(error))
        else:
            out[record.name] = ("plain", f"{type(error).__name__}: {error}")
    return out


def _clear_refusal(error, name):
    """A real-use name's error is clear when pmapkit.legacy raised it (its
    removal errors name the name, the release and what to use) or it
    names the name with the release and a replacement."""
    if isinstance(error, RemovedFromJax):
        return True
    return clear_error(error, name.replace(":", "."))




def write_missing(path):
    """Writes ``real_use_missing.txt``: the names of the census of real use
    (kind ``name``, any number of repositories) this JAX lacks, probed here
    before any install, whose owner is a module this JAX still imports (a
    refusal can be chained on it), that the release census does not hold
    and that are internal (a ``_`` part: ``jax._src.*``, private names);
    ``census_records`` refuses each as a JAX internal.""" 
    from pmapkit.legacy.census import missing_here
    held = {".".join(p) for p in union()}
    lines = []
    for record in real_use():
        if record.kind != "name" or record.name in held:
            continue
        if not any(part.startswith("_") for part in record.name.split(".")):
            # public, yet in no release census (which holds every public
            # name of 0.1.77-0.9.2): never a JAX name (a typo, a fork's)
            continue
        ok, _ = probe_real_use(record)
        if ok:
            continue
        owner = record.name.rpartition(".")[0]
        try:
            module = _resolve(owner)
        except Exception:       # its owner is gone too: refused with it, or plain
            continue
        import types
        if isinstance(module, types.ModuleType) and not missing_here(owner):
            lines.append(record.name)
    with open(path, "w") as f:
        f.write("# names of the census of real use (real_use.tsv) this JAX lacks whose "
                "module it still has, not in the release census: python -m "
                "pmapkit.legacy.census_check --write-missing\n")
        f.write("\n".join(sorted(lines)) + "\n")
    return len(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--write-missing"]:
        import os
        from pmapkit.legacy import census
        path = os.path.join(os.path.dirname(os.path.abspath(census.__file__)),
                            "census_data", "real_use_missing.txt")
        print(f"{write_missing(path)} names -> {path}")
        return 0
    unknown = [a for a in argv if a not in ("--json", "--no-install", "--real-use")]
    if unknown:
        print(f"census: unknown option {unknown[0]!r} (use --json, --no-install, "
              "--real-use)", file=sys.stderr)
        return 2
    install = None
    if "--no-install" not in argv:
        import pmapkit.legacy
        install = pmapkit.legacy.install
    records = real_use()
    native = {r.name: probe_real_use(r) for r in records}      # before any install
    outcomes = classify(union(), install=install)
    per_release = {r: counts(outcomes, r) for r in RELEASES}
    used = classify_real_use(records, native=native)
    real = {label: _tally(used, [r for r in records if r.repos >= least])
            for label, least in (("all", 1), ("2+ repositories", 2))}
    if "--json" in argv:
        json.dump({"releases": per_release,
                   "names": {".".join(p): list(v) for p, v in outcomes.items()
                             if v[0] != "native"},
                   "real_use": real,
                   "real_use_names": {r.name: [*used[r.name], r.repos] for r in records
                                      if used[r.name][0] != "native"}}, sys.stdout)
        print()
        return 0
    import jax
    print(f"census against jax {jax.__version__}"
          f"{'' if '--no-install' in argv else ' + pmapkit.legacy.install()'}")
    print(f"{'release':<10}{'pairs':>7}" + "".join(f"{o:>9}" for o in OUTCOMES))
    for release, tally in per_release.items():
        print(f"{release:<10}{sum(tally.values()):>7}"
              + "".join(f"{tally[o]:>9}" for o in OUTCOMES))
    tally = dict.fromkeys(OUTCOMES, 0)
    for outcome, _ in outcomes.values():
        tally[outcome] += 1
    print(f"{'union':<10}{len(outcomes):>7}" + "".join(f"{tally[o]:>9}" for o in OUTCOMES))
    print(f"census of real use ({len({s for r in records for s in r.repositories()})} "
          "repositories):")
    print(f"{'reached by':<16}{'names':>7}" + "".join(f"{o:>9}" for o in OUTCOMES))
    for label, counted in real.items():
        print(f"{label:<16}{sum(counted.values()):>7}"
              + "".join(f"{counted[o]:>9}" for o in OUTCOMES))
    if "--real-use" in argv:
        for r in records:
            outcome, text = used[r.name]
            if r.repos >= 2 and outcome != "native":
                print(f"  {outcome:<7}{r.repos:>3}  {r.name}"
                      + (f"  -- {text.splitlines()[0][:160]}" if text else ""))
    return 0


def _tally(outcomes, records):
    tally = dict.fromkeys(OUTCOMES, 0)
    for r in records:
        tally[outcomes[r.name][0]] += 1
    return tally




if __name__ == "__main__":
    sys.exit(main())
