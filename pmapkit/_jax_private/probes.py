"""One probe per JAX/jaxlib internal the hit path relies on, run at import.

Each asks this JAX whether an internal is shaped as pmapkit uses it. Where
it is not, the feature built on it is off, with the reason in ``OFF``, and
the generic path runs instead: never a TypeError at a call.

- ``"express"``: jaxlib's C++ ``pjit`` constructor (``express.cpp_pjit``)
  takes pmapkit's eight arguments by position (``PJIT_ARGUMENTS``; JAX's own
  callers pass a ninth, the cache, which must then have a default). Off: no
  express calls, and no config state is watched for them (calls of one numpy
  argument take the hit path).
- ``"host callback fast dispatch"``: ``jax._src.pjit._get_fastpath_data``
  takes ``FASTPATH_PARAMETERS`` first, and pxla's ``ExecuteReplicated`` sets
  the two effect attributes pmapkit reads. Off: its global is left as JAX's,
  and programs with host callbacks take JAX's Python dispatch.
- ``"jax.pmap outputs"``: ``jax._src.pmap._cached_shard_map`` is a function
  JAX's pmap reads as a module global. Off: its global is left as JAX's, and
  jax.pmap's results are told by their layout alone, as any array's.

- ``"hit-path getters"``: a ``jax.Array``'s ``aval``, ``_sharding`` and
  ``_committed`` and a config state's ``value`` are properties with a
  getter, and ``is_deleted`` a method on the class (``GETTERS``): the hit
  path calls those getters themselves (``runtime.array_readers``,
  ``core.state_value_of``). Off: it reads them by name.

``run()`` probes again (tests change a probe's input, then restore it).
"""
from __future__ import annotations

import ast as _ast
import inspect as _inspect

#: The arguments pmapkit passes jaxlib's C++ ``pjit``, in order.
PJIT_ARGUMENTS = ("function_name", "fun", "cache_miss", "static_argnums", "static_argnames",
                  "global_cache_key", "pytree_registry", "shard_arg_fallback")
#: The leading parameters of ``_get_fastpath_data`` pmapkit's wrapper passes on.
FASTPATH_PARAMETERS = ("executable", "out_tree", "args_flat", "out_flat", "effects")
#: What pmapkit reads of a program's ``ExecuteReplicated`` there.
EXECUTE_REPLICATED_ATTRIBUTES = ("has_unordered_effects", "ordered_effects")

#: The properties the hit path reads of a jax.Array by their getters.
GETTERS = ("aval", "_sharding", "_committed")

FEATURES = ("express", "host callback fast dispatch", "jax.pmap outputs", "hit-path getters")

#: Feature -> why it is off here (a feature absent is on). The rooms that
#: register the probes are imported at the boundary's first use of them
#: (``pmapkit._jax_private``); ``run()`` and ``off()`` import them first.
OFF: dict = {}

#: Set by the package: imports the rooms that register probes not yet run.
_register_all = None


def parameters(fn):
    """``[(name, has a default)]`` of ``fn``'s parameters, from Python's
    signature or a nanobind function's text signature; None where neither
    tells."""
    try:
        signature = _inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        return [(p.name, p.default is not p.empty) for p in signature.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    texts = [entry[0] for entry in getattr(fn, "__nb_signature__", ()) if entry]
    if not texts:
        doc = (getattr(fn, "__doc__", None) or "").splitlines()
        texts = ["def " + doc[0]] if doc and "(" in doc[0] else []
    if len(texts) != 1:
        return None  # none, or overloads: nothing one call can rely on
    try:
        tree = _ast.parse(texts[0].strip() + ": ...")
    except SyntaxError:
        return None
    fn_node = tree.body[0]
    if not isinstance(fn_node, _ast.FunctionDef):
        return None
    args = fn_node.args.posonlyargs + fn_node.args.args
    first_default = len(args) - len(fn_node.args.defaults)
    return [(a.arg, i >= first_default) for i, a in enumerate(args)]


def cpp_pjit_reason(pjit):
    """Why jaxlib's C++ ``pjit`` cannot be built with pmapkit's arguments,
    or None when it can."""
    params = parameters(pjit)
    if params is None:
        return "jaxlib's C++ pjit does not tell its parameters"
    names = tuple(name for name, _ in params)
    if names[:len(PJIT_ARGUMENTS)] != PJIT_ARGUMENTS:
        return (f"jaxlib's C++ pjit takes ({', '.join(names)}), not pmapkit's "
                f"({', '.join(PJIT_ARGUMENTS)}) first")
    required = [name for name, has_default in params[len(PJIT_ARGUMENTS):] if not has_default]
    if required:
        return (f"jaxlib's C++ pjit also requires {', '.join(required)} (pmapkit passes "
                f"{len(PJIT_ARGUMENTS)} arguments)")
    return None


def get_fastpath_data_reason(get_fastpath_data, execute_replicated):
    """Why pmapkit's wrapper of ``_get_fastpath_data`` would not fit this
    JAX, or None when it does."""
    get_fastpath_data = getattr(get_fastpath_data, "_pmapkit_original", get_fastpath_data)
    if not callable(get_fastpath_data):
        return "jax._src.pjit has no _get_fastpath_data"
    params = parameters(get_fastpath_data)
    if params is None:
        return "jax._src.pjit._get_fastpath_data does not tell its parameters"
    names = tuple(name for name, _ in params)
    if names[:len(FASTPATH_PARAMETERS)] != FASTPATH_PARAMETERS:
        return (f"jax._src.pjit._get_fastpath_data takes ({', '.join(names)}), not "
                f"({', '.join(FASTPATH_PARAMETERS)}) first")
    init = getattr(getattr(execute_replicated, "__init__", None), "__code__", None)
    missing = [a for a in EXECUTE_REPLICATED_ATTRIBUTES
               if init is None or a not in init.co_names]
    if missing:
        return f"pxla.ExecuteReplicated sets no {', '.join(missing)}"
    return None


def cached_shard_map_reason(pmap_module):
    """Why a wrapper of ``jax._src.pmap._cached_shard_map`` would see no
    jax.pmap program, or None when it would."""
    if pmap_module is None:
        return "jax has no jax._src.pmap"
    found = getattr(pmap_module, "_cached_shard_map", None)
    found = getattr(found, "_pmapkit_original", found)
    if not callable(found):
        return "jax._src.pmap has no _cached_shard_map"
    functions = [_inspect.unwrap(v) for v in vars(pmap_module).values() if callable(v)]
    readers = [f for f in functions
               if _inspect.isfunction(f) and f.__module__ == pmap_module.__name__
               and _reads_global(f.__code__, "_cached_shard_map")]
    if not readers:
        return "nothing in jax._src.pmap reads _cached_shard_map as a module global"
    return None


def getters_reason(array_type, state_type):
    """Why the hit path cannot call the getters of ``array_type``'s
    ``GETTERS``, its ``is_deleted`` and ``state_type``'s ``value``
    themselves, or None when it can."""
    for owner, name in [(array_type, n) for n in GETTERS] + [(state_type, "value")]:
        found = _inspect.getattr_static(owner, name, None)
        if not isinstance(found, property) or not callable(found.fget):
            return f"{owner.__name__}.{name} is not a property with a getter"
    method = _inspect.getattr_static(array_type, "is_deleted", None)
    if not callable(method) or hasattr(type(method), "__set__"):
        return f"{array_type.__name__}.is_deleted is not a method of the class"
    return None


def _reads_global(code, name):
    """Whether ``code`` or a function nested in it names global ``name``."""
    if name in code.co_names:
        return True
    return any(_reads_global(c, name) for c in code.co_consts if _inspect.iscode(c))


def pmap_module():
    """JAX's ``jax._src.pmap`` (the ``"jax.pmap outputs"`` probe's input),
    or None where this JAX has none."""
    try:
        from jax._src import pmap as module
    except ImportError:
        return None
    return module


# Feature -> its probe (no arguments: it reads its input where the module
# that uses the internal keeps it, so a test can change that input).
_PROBES: dict = {}


def register(feature, probe):
    """Probe ``feature`` now with ``probe()`` (a reason, or None), and again
    at every ``run()``."""
    if feature not in FEATURES:
        raise ValueError(f"no probed feature {feature!r}; the features: {FEATURES}")
    _PROBES[feature] = probe
    _record(feature, probe())


def _record(feature, reason):
    if reason is None:
        OFF.pop(feature, None)
    else:
        OFF[feature] = reason


def _registered():
    if len(_PROBES) < len(FEATURES) and _register_all is not None:
        _register_all()


def run():
    """Probe every internal again; ``OFF`` then says what is off here."""
    _registered()
    for feature, probe in _PROBES.items():
        _record(feature, probe())
    return dict(OFF)


def off(feature):
    """Why ``feature`` is off here, or None when it is on."""
    if feature not in FEATURES:
        raise ValueError(f"no probed feature {feature!r}; the features: {FEATURES}")
    if feature not in _PROBES:
        _registered()
    return OFF.get(feature)
