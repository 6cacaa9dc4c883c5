"""Whether a file's pmap sites get a mesh cut to their mapped size.

Classic pmap ran a mapped axis of n on the first n devices. A translated
site's mesh of every local device is exact only where n is the local device
count (a program sizing its data by ``jax.local_device_count()``, the classic
training loop); ``_first_devices`` (``written``) cuts the mesh to n when
``jax.jit`` traces, at the cost of a helper in the file. It is written where
the source shows a size of its own: a pmap site (``jax.pmap(f)(...)``, or a
name bound to one) called with an argument whose leading size is a number in
the source (``normalize(jnp.arange(4.))``, ``pmap(f)(jnp.ones((7, 3)))``, or a
name assigned such an array). Elsewhere a site mapping a size other than the
device count fails loudly in ``jax.shard_map`` ("evenly divisible").
"""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import syntax as sx

# Array makers whose first argument is the shape (or the length).
_SHAPED = ("arange", "ones", "zeros", "empty", "full", "eye", "reshape")
# jax.random functions whose second argument is the number or the shape.
_KEYED = ("split", "normal", "uniform", "randint")


def _leading_literal(node):
    """Whether the expression makes an array whose leading size is written as a number."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, (cst.Attribute, cst.Name)):
        return False
    name = node.func.attr.value if isinstance(node.func, cst.Attribute) else node.func.value
    positional = [a.value for a in node.args if a.keyword is None and not a.star]
    if name in _KEYED:          # random.split(key, 8), random.normal(key, (8, 3))
        shape = positional[1] if len(positional) > 1 else None
    elif name in _SHAPED:       # jnp.arange(4.), jnp.ones((7, 3)), x.reshape((4, 2))
        shape = positional[0] if positional else None
    else:
        return False
    if isinstance(shape, (cst.Tuple, cst.List)) and shape.elements:
        shape = shape.elements[0].value
    return isinstance(shape, (cst.Integer, cst.Float))


def meshes_follow_arguments(ctx, module, pmapped_names):
    """Whether a pmap site of ``module`` (``jax.pmap(f)(...)``, or a name bound to one)
    is called with an argument of literal leading size (or a name assigned one)."""
    calls = [n for n in sx.nodes(module) if isinstance(n, cst.Call)]
    literal_names = {t.target.value for n in sx.nodes(module) if isinstance(n, cst.Assign)
                     and _leading_literal(n.value) for t in n.targets
                     if isinstance(t.target, cst.Name)}
    for call in calls:
        func = call.func
        site = (isinstance(func, cst.Call) and ctx._pmap_site(func) is not False) or (
            isinstance(func, cst.Name) and func.value in pmapped_names)
        if site and any(_leading_literal(a.value) or (
                isinstance(a.value, cst.Name) and a.value.value in literal_names)
                for a in call.args if a.keyword is None):
            return True
    return False
