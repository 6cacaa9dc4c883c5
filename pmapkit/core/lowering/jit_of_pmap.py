"""The jit-of-pmap UserWarning, in both eras' words.

jax 0.4.x said "The jitted function foo includes a pmap. Using jit-of-pmap
can lead to inefficient data movement, ..."; later releases "The function
jit(foo) includes a pmap. ...". Code of either era silences it with
``warnings.filterwarnings(message=...)``, which matches the start of the
text (``re.match``), so no single ordering of the two sentences satisfies
both. The warning carries both, ordered for the filter that will judge it:
the first filter in ``warnings.filters`` that takes a UserWarning and whose
pattern matches one ordering picks it (the later era's first only when such
a filter asks for it); ``warnings.warn`` then applies that filter itself,
with its action, module, line and registry.
"""
from __future__ import annotations

import warnings

_CLASSIC = (
    "The jitted function {fun} includes a pmap. Using jit-of-pmap can lead to "
    "inefficient data movement, as the outer jit does not preserve sharded data "
    "representations and instead collects input and output arrays onto a single "
    "device. Consider removing the outer jit unless you know what you're doing. "
    "See https://github.com/google/jax/issues/2926.")
_LATER = (
    "The function jit({fun}) includes a pmap. Using jit-of-pmap can lead to "
    "inefficient data movement, as the outer jit does not preserve sharded data "
    "representations and instead collects input and output arrays onto a single "
    "device. Consider removing the outer jit unless you know what you're doing. "
    "See https://github.com/jax-ml/jax/issues/2926. Or use jax.shard_map instead "
    "of pmap under jit compilation.")


def texts(fun, name):
    """The two orderings: (0.4.x wording first, later wording first)."""
    classic, later = _CLASSIC.format(fun=fun), _LATER.format(fun=fun)
    tail = f" (pmapped function {name}.)"
    return (f"{classic} ({later}){tail}", f"{later} ({classic}){tail}")


def chosen_text(fun, name):
    """The ordering the first filter deciding a UserWarning of either text
    asks for (the 0.4.x one when none does, or a filter matches any text)."""
    classic_first, later_first = texts(fun, name)
    for _action, pattern, category, _module, _line in warnings.filters:
        if not issubclass(UserWarning, category):
            continue
        if pattern is None:
            break
        try:
            if pattern.match(classic_first):
                break
            if pattern.match(later_first):
                return later_first
        except AttributeError:   # a plain-text filter (Python's own defaults)
            continue
    return classic_first


def warn(fun, name, stacklevel):
    warnings.warn(chosen_text(fun, name), UserWarning, stacklevel=stacklevel + 1)
