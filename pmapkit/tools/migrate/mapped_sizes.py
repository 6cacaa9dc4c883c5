"""Whether a file's pmap sites get a mesh cut to their mapped size.

Classic pmap ran a mapped axis of n on the first n devices. A translated
site's mesh of every local device is exact only where n is the local device
count (a program sizing its data by ``jax.local_device_count()``, the classic
training loop); ``_first_devices`` (``written``) cuts the mesh to n when
``jax.jit`` traces, at the cost of a helper in the file. It is written where
the source shows a size that is not the device count: a pmap site
(``jax.pmap(f)(...)``, or a name bound to one) called with an array made
there, or a name assigned one, whose leading size is written as anything but
the device count: a number (``normalize(jnp.arange(4.))``,
``pmap(f)(jnp.ones((7, 3)))``) or a name or expression not assigned
``jax.device_count()``/``local_device_count()``/``len(jax.devices())``
(``random.split(key, n_chains)`` with ``n_chains = 2``). An argument made
elsewhere (a parameter, a loaded batch) is taken to be sized by the device
count: a site mapping another size then fails loudly in ``jax.shard_map``
("evenly divisible"), never with a wrong value.
"""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import syntax as sx

# Array makers whose first argument is the shape (or the length).
_SHAPED = ("arange", "ones", "zeros", "empty", "full", "eye", "reshape")
# jax.random functions whose second argument is the number or the shape.
_KEYED = ("split", "normal", "uniform", "randint")


_DEVICE_COUNTS = ("device_count", "local_device_count")
_DEVICE_LISTS = ("devices", "local_devices")


def _callee(node):
    func = node.func
    return func.attr.value if isinstance(func, cst.Attribute) else (
        func.value if isinstance(func, cst.Name) else None)


def _is_device_count(node, counted):
    """Whether ``node`` is the device count: ``jax.device_count()``,
    ``len(jax.local_devices())``, or a name assigned one of them."""
    if isinstance(node, cst.Name):
        return node.value in counted
    if not isinstance(node, cst.Call):
        return False
    if _callee(node) in _DEVICE_COUNTS:
        return True
    return (_callee(node) == "len" and len(node.args) == 1
            and isinstance(node.args[0].value, cst.Call)
            and _callee(node.args[0].value) in _DEVICE_LISTS)


def _leading_size(node):
    """The expression written as the leading size of the array ``node`` makes, or None."""
    if not isinstance(node, cst.Call):
        return None
    name = _callee(node)
    positional = [a.value for a in node.args if a.keyword is None and not a.star]
    if name in _KEYED:          # random.split(key, 8), random.normal(key, (8, 3))
        shape = positional[1] if len(positional) > 1 else None
    elif name == "reshape" and len(positional) > 1 and not isinstance(
            positional[0], (cst.Tuple, cst.List, cst.Integer)) and not _method(node):
        shape = positional[1]   # jnp.reshape(x, (4, 2)), not x.reshape(n, 3)
    elif name in _SHAPED:       # jnp.arange(4.), jnp.ones((7, 3)), x.reshape((4, 2))
        shape = positional[0] if positional else None
    else:
        return None
    if isinstance(shape, (cst.Tuple, cst.List)):
        shape = shape.elements[0].value if shape.elements else None
    return shape


def _method(node):
    """Whether the call ``node`` is a method of an array (``np.arange(8).reshape(n, 3)``,
    ``x.reshape(n, 3)``), not a function of numpy or jax.numpy."""
    func = node.func
    if not isinstance(func, cst.Attribute):
        return False
    owner = func.value
    if isinstance(owner, cst.Attribute):        # jax.numpy.reshape, or a.b.reshape
        return owner.attr.value not in ("numpy", "jnp", "np")
    return not (isinstance(owner, cst.Name) and owner.value in _NUMPY_NAMES)


# The names files give numpy and jax.numpy.
_NUMPY_NAMES = ("np", "jnp", "numpy", "onp", "jax_np", "anp")


def _other_size(node, counted):
    """Whether the array ``node`` makes has a leading size written as other than the device count."""
    shape = _leading_size(node)
    return shape is not None and not _is_device_count(shape, counted)


def meshes_follow_arguments(pmaps, module, pmapped_names):
    """Whether a pmap site of ``module`` (``jax.pmap(f)(...)``, or a name bound to one)
    is called with an array whose leading size is written as other than the device
    count (or a name assigned one)."""
    assigns = [(t.target.value, n.value) for n in sx.nodes(module) if isinstance(n, cst.Assign)
               for t in n.targets if isinstance(t.target, cst.Name)]
    counted = set()
    for name, value in assigns:             # n = jax.local_device_count(); m = n
        if _is_device_count(value, counted):
            counted.add(name)
    sized = {name for name, value in assigns if _other_size(value, counted)}
    for call in (n for n in sx.nodes(module) if isinstance(n, cst.Call)):
        func = call.func
        site = (isinstance(func, cst.Call) and pmaps.site(func) is not False) or (
            isinstance(func, cst.Name) and func.value in pmapped_names)
        if site and any(_other_size(a.value, counted) or (
                isinstance(a.value, cst.Name) and a.value.value in sized)
                for a in call.args if a.keyword is None):
            return True
    return False


def _literal_size(node, once):
    """The leading size of the array ``node`` makes when the source writes it as a
    number (``jnp.arange(4.)``, ``jnp.ones((7, 3))``, ``random.split(key, 2)``,
    or a name assigned such an array once: ``once``), else None."""
    if isinstance(node, cst.Name):
        return once.get(node.value)
    if not isinstance(node, cst.Call):
        return None
    if _callee(node) == "arange" and (len(node.args) != 1 or node.args[0].keyword):
        return None     # arange(start, stop), arange(n, dtype=...): not read
    shape = _leading_size(node)
    if isinstance(shape, cst.Integer):
        return int(shape.value, 0)
    if isinstance(shape, cst.Float) and _callee(node) == "arange":
        value = float(shape.value)
        return int(value) if value.is_integer() and value > 0 else None
    return None


def _calls_sized(calls, once):
    """The one literal leading size of every positional argument of every call in
    ``calls`` (each argument mapped along its axis 0), or None."""
    sizes = set()
    for call in calls:
        if not call.args or any(a.keyword is not None or a.star for a in call.args):
            return None
        sizes.update(_literal_size(a.value, once) for a in call.args)
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def literal_sizes(pmaps, module, sites, decorated):
    """``{id(site): n}`` for every pmap site of ``module`` when each is provably
    called only with arrays whose leading size is one number ``n`` written in the
    source (its mesh is then the first ``n`` local devices, where classic pmap ran
    it, with no ``_first_devices``), else None.

    ``sites``: the file's pmap calls; ``decorated``: ``{id(decorator): def}`` of
    its pmap-decorated defs. A site qualifies when it maps axis 0 of each
    argument (no ``in_axes``/``devices=``) and is called at once
    (``jax.pmap(f)(jnp.arange(4.))``), or is a def or a name bound once whose
    every mention in the file is a call (never passed on as a value)."""
    assigned = sx.bindings(module)
    once = {}
    for name, values in assigned.items():
        if len(values) == 1 and values[0] is not None:
            size = _literal_size(values[0], {})
            if size is not None:
                once[name] = size
    calls = [n for n in sx.nodes(module) if isinstance(n, cst.Call)]
    mentions = {}
    for n in sx.nodes(module):
        if isinstance(n, cst.Name):
            mentions[n.value] = mentions.get(n.value, 0) + 1
    found = {}

    def by_name(name, binding_mentions):
        called = [c for c in calls if isinstance(c.func, cst.Name) and c.func.value == name]
        if len(assigned.get(name, ())) + binding_mentions != 1 or (
                mentions.get(name, 0) != len(called) + 1):
            return None
        return _calls_sized(called, once)

    def maps_axis_0(node):
        return isinstance(node, cst.Name) or isinstance(node, cst.Attribute) or not any(
            a.keyword is not None and a.keyword.value in ("in_axes", "devices")
            for a in node.args)

    for call in sites:
        if not maps_axis_0(call):
            return None
        if id(call) in pmaps.called_at_once:
            outer = next(c for c in calls if c.func is call)
            size = _calls_sized([outer], once)
        elif id(call) in pmaps.assigned_calls:
            size = by_name(pmaps.assigned_calls[id(call)], 0)
        else:
            return None
        if size is None:
            return None
        found[id(call)] = size
    for decorator, fn in decorated.items():
        node = next(d.decorator for d in fn.decorators if id(d.decorator) == decorator)
        size = by_name(fn.name.value, 0) if maps_axis_0(node) else None
        if size is None:
            return None
        found[decorator] = size
    return found
