"""What a refusal names as the replacement, held as facts: the dotted names
in a record's ``modern`` text and whether each is an object this JAX has.

``named(text)`` reads the dotted names (``jnp.`` / ``np.`` / ``lax.``
spelled out, ``x.attr`` read as ``jax.Array.attr``); ``resolve(name)`` finds
the object (the longest prefix that imports, then attributes);
``problems(record)`` says what is wrong with a refusal's replacement: it
names the removed name itself, names nothing (and is neither "nothing" nor
a JAX internal), or names what this JAX lacks. Run before
``pmapkit.legacy.install()``: the replacement must be JAX's, not pmapkit's.
"""
from __future__ import annotations

import importlib
import re
import warnings

__all__ = ["named", "resolve", "problems", "NeedsPackage", "OUTSIDE"]

_ABBREVIATIONS = {"jnp": "jax.numpy", "np": "numpy", "lax": "jax.lax", "x": "jax.Array",
                  "sharding": "jax.sharding.NamedSharding"}
_ROOTS = ("jax", "jaxlib", "numpy", "math", "functools", "optax", "orbax") + tuple(
    _ABBREVIATIONS)
_DOTTED = re.compile(r"(?<![\w.])(" + "|".join(_ROOTS) + r")((?:\.[A-Za-z_]\w*)+)")
#: Packages outside JAX a replacement may name: not checked when absent.
OUTSIDE = ("optax", "orbax")


def named(text):
    """The dotted names ``text`` mentions, abbreviations spelled out."""
    found = []
    for head, rest in _DOTTED.findall(text):
        found.append(_ABBREVIATIONS.get(head, head) + rest)
    return list(dict.fromkeys(found))


class NeedsPackage(ImportError):
    """The named module is JAX's but needs a package outside JAX that is not
    installed here (tensorstore for array_serialization): not checkable."""


def resolve(name):
    """The object dotted ``name`` reaches; raises what the lookup raises
    (``NeedsPackage`` for a module that needs a package outside JAX)."""
    parts = name.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError as e:
                if e.name and e.name.partition(".")[0] not in ("jax", "jaxlib") \
                        and parts[0] in ("jax", "jaxlib"):
                    raise NeedsPackage(f"{'.'.join(parts[:cut])} needs {e.name}") from e
                if cut == 1:
                    raise
                continue
            except ImportError:
                if cut == 1:
                    raise
                continue
            break
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
    return obj


def problems(record, internal="JAX internal; no public replacement"):
    """What is wrong with refusal ``record``'s replacement (``[]``: none)."""
    modern = record.modern
    if modern == internal:
        return []
    names = named(modern)
    wrong = []
    if record.name in names or any(n.endswith("." + record.attr) and
                                   n.rpartition(".")[0] == record.owner for n in names):
        wrong.append(f"names the removed {record.name} as its own replacement")
    if not names and not modern.startswith("nothing"):
        wrong.append(f"names no object: {modern!r}")
    for name in names:
        if name == record.name:
            continue
        try:
            resolve(name)
        except NeedsPackage:
            continue          # JAX's module; its package is not installed here
        except ImportError as e:
            if name.partition(".")[0] in OUTSIDE:
                continue      # a package outside JAX, not installed here
            wrong.append(f"{name}: {type(e).__name__}: {e}")
        except Exception as e:      # the fact asked for: it must resolve
            wrong.append(f"{name}: {type(e).__name__}: {e}")
    return wrong
