"""Small functions ``pmapkit migrate`` writes into a migrated file where one
expression cannot say what the classic API did (plain jax 0.10 only: the
migrated file must run without pmapkit).

Each helper is source text plus the modules it needs at the top of the file.
A helper is written once per file, after its imports, and only when a rewrite
in that file uses it; a file that defines the name already keeps its own.
"""
from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Helper:
    name: str
    source: str
    imports: tuple = ("jax",)     # top-level modules the source refers to


CLASSIC_PRNG = Helper("_classic_prng", '''
def _classic_prng():
    # jax.random streams as the original drew them (JAX before 0.5, and pmapkit
    # run): jax_threefry_partitionable off (written by pmapkit migrate).
    jax.config.update("jax_threefry_partitionable", False)


_classic_prng()
''')


PMAP = Helper("_pmap", '''
_PMAP_WRAPPERS = {}   # id(fun) -> (a weak reference to fun, {options: _pmap_program(...)})


class _PmapBodies(threading.local):
    # Per thread (JAX traces per thread): (mesh, axis names manual there) of each _pmap
    # body being traced, innermost last.
    def __init__(self):
        self.frames = []


_PMAP_MESHES = _PmapBodies()


class _PmapNeedsAxis(Exception):
    # Raised by a _pmap called in a _pmap body whose mesh lacks its axis: (depth, name, size).
    pass


def _pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
          devices=None, backend=None, axis_size=None, donate_argnums=()):
    # Classic jax.pmap as jax.jit of jax.shard_map over a mesh of the devices (written by
    # pmapkit migrate). The body sees each device's slice without the mapped axis (at
    # in_axes, per leaf); outputs get it back at out_axes (None: device 0's value); a
    # pmap inside a pmap body runs over a mesh with an axis for each; inputs on other
    # devices are moved, as classic pmap moved them. Wrappers of one function object
    # share their programs, as jax.pmap's did; any other function object, even with the
    # same code, is traced anew, so it always reads its own globals, cells and defaults.
    if backend is not None or axis_size is not None:   # JAX 0.10's own pmap takes these
        return jax.pmap(fun, axis_name, in_axes=in_axes, out_axes=out_axes,
                        static_broadcasted_argnums=static_broadcasted_argnums, devices=devices,
                        backend=backend, axis_size=axis_size, donate_argnums=donate_argnums)
    if not callable(fun):
        raise TypeError(f"pmap: fun must be callable, got {fun!r}")
    for what, axes in (("in_axes", in_axes), ("out_axes", out_axes)):
        if not all(type(a) is int for a in jax.tree.leaves(axes)):
            raise TypeError(f"pmap {what} must be an int, None, or (nested) container "
                            f"with those types as leaves, but got {axes!r}.")

    def argnums(what, value):
        value = (value,) if isinstance(value, int) else tuple(value)
        if not all(type(k) is int and k >= 0 for k in value):
            raise TypeError(f"pmap {what} must be an int or a tuple of ints >= 0, got {value!r}")
        return value

    static = argnums("static_broadcasted_argnums", static_broadcasted_argnums)
    donate = argnums("donate_argnums", donate_argnums)
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if devices is not None:
        devices = tuple(devices)
        if not devices:
            raise ValueError("pmap: 'devices' must be non-empty, or None")
    options = (axis_name, repr(in_axes), repr(out_axes), static, devices, donate)
    entry = _PMAP_WRAPPERS.get(id(fun))
    program = None if entry is None or entry[0]() is not fun else entry[1].get(options)
    if program is None:
        # Held weakly on fun: the program dies with the function (a lambda made anew in
        # a loop), while the wrapper returned holds fun.
        try:
            ref = weakref.ref(fun, lambda _, key=id(fun): _PMAP_WRAPPERS.pop(key, None))
        except TypeError:   # not weakly referable: a program for this wrapper alone
            ref, entry = (lambda: fun), None
        else:
            if entry is None or entry[0]() is not fun:
                entry = _PMAP_WRAPPERS[id(fun)] = (ref, {})
        program = _pmap_program(ref, axis_name, in_axes, out_axes, static, devices, donate)
        if entry is not None:
            entry[1][options] = program
    jitted, nested, moved = program

    @functools.wraps(fun)
    def mapped(*args, **kwargs):
        if _PMAP_MESHES.frames:
            return nested(args, kwargs)
        try:
            return jitted(*args, **kwargs)
        except ValueError as exc:
            if "incompatible devices" not in str(exc) and "does not match the sharding" not in str(exc):
                raise
        args, kwargs = moved(args, kwargs)
        return jitted(*args, **kwargs)

    mapped.lower = jitted.lower
    return mapped


def _pmap_program(fun_ref, axis_name, in_axes, out_axes, static, devices, donate):
    # What the _pmap wrappers of one function and options share: (the jax.jit of the
    # pmap called outside any pmap body, the pmap called in one, the mover of inputs).
    P = jax.sharding.PartitionSpec
    unmapped = "unmapped"   # None in_axes/out_axes leaves, as a leaf tree.broadcast keeps
    inner_axes = []         # (name, size) of the pmaps met in this one's body, outermost first

    def mark(axes):
        return jax.tree.map(lambda a: unmapped if a is None else a, axes,
                            is_leaf=lambda a: a is None)

    def spec(axis, name):
        return P() if axis is None else P(*([None] * axis), name)

    def plan(args, kwargs):
        # (dynamic leaves, their treedef, per-leaf mapped axis or None, mapped size)
        if static and max(static) >= len(args):
            raise ValueError(f"pmapped function has static_broadcasted_argnums={static} but "
                             f"was called with only {len(args)} positional arguments")
        dynamic = tuple(a for k, a in enumerate(args) if k not in static)
        axes = in_axes
        if isinstance(in_axes, tuple):
            if len(in_axes) != len(args):
                raise ValueError(f"pmap in_axes={in_axes!r} has {len(in_axes)} entries for "
                                 f"{len(args)} positional arguments")
            axes = tuple(a for k, a in enumerate(in_axes) if k not in static)
        leaves, treedef = jax.tree.flatten((dynamic, kwargs))
        try:
            per_leaf = jax.tree.leaves(jax.tree.broadcast(mark((axes, 0)), (dynamic, kwargs)))
        except ValueError:
            raise ValueError(f"pmap in_axes={in_axes!r} is not a tree prefix of the "
                             "positional arguments") from None
        size, normal = None, []
        for leaf, axis in zip(leaves, per_leaf):
            if axis == unmapped:
                normal.append(None)
                continue
            shape = getattr(leaf, "shape", None)
            shape = numpy.shape(leaf) if shape is None else shape
            at = axis + len(shape) if axis < 0 else axis
            if not 0 <= at < len(shape):
                raise ValueError(f"pmap in_axes={in_axes!r}: axis {axis} is out of range for "
                                 f"an argument of shape {tuple(shape)}")
            if size is None:
                size = shape[at]
            elif shape[at] != size:
                raise ValueError("pmap got inconsistent sizes for array axes to be mapped: "
                                 f"{size} and {shape[at]}")
            normal.append(at)
        if size is None:
            raise ValueError("pmap requires at least one argument with a mapped axis")
        return leaves, treedef, normal, size

    def top_mesh(size):
        # The mesh of a pmap called outside any pmap body: an axis for it, then one for
        # each pmap met inside its body.
        name = "_pmap_axis0" if axis_name is None else axis_name
        shape = (size,) + tuple(s for _, s in inner_axes)
        count = int(numpy.prod(shape))
        if devices is not None:
            if inner_axes:
                raise ValueError("pmap: nested pmaps with devices= are not supported")
            if len(devices) != size:
                raise ValueError(f"pmap: devices= has {len(devices)} devices, but the mapped "
                                 f"axis has size {size}")
            chosen = devices
        else:
            chosen = jax.local_devices()[:count]
            if len(chosen) < count:
                raise ValueError(f"pmap: the computation needs {count} devices, but only "
                                 f"{len(chosen)} are available")
        return (jax.sharding.Mesh(numpy.array(chosen).reshape(shape),
                                  (name,) + tuple(n for n, _ in inner_axes)), name)

    def run(args, kwargs, mesh, name, manual):
        leaves, treedef, axes, size = plan(args, kwargs)

        def body(*blocks):
            sliced = [b if a is None else jax.lax.squeeze(b, (a,)) for b, a in zip(blocks, axes)]
            dynamic, kw = jax.tree.unflatten(treedef, sliced)
            rest = iter(dynamic)
            full = [args[k] if k in static else next(rest) for k in range(len(args))]
            _PMAP_MESHES.frames.append((mesh, manual))
            try:
                out = fun_ref()(*full, **kw)
            finally:
                _PMAP_MESHES.frames.pop()
            where = jax.tree.broadcast(mark(out_axes), out)
            return jax.tree.map(lambda o, a: o if a == unmapped else jax.numpy.expand_dims(
                o, max(a, 0)), out, where)

        # A negative out_axes leaf: the mapped axis comes out first, then moves there.
        out_specs = jax.tree.map(lambda a: spec(None if a is None else max(a, 0), name),
                                 out_axes, is_leaf=lambda a: a is None)
        # In an enclosing pmap body, shard_map takes the mesh in context (its axes typed).
        here = mesh if len(manual) == 1 else jax.sharding.get_abstract_mesh()
        out = jax.shard_map(body, mesh=here, in_specs=tuple(spec(a, name) for a in axes),
                            out_specs=out_specs, axis_names={name}, check_vma=False)(*leaves)
        if all(a >= 0 for a in jax.tree.leaves(out_axes)):
            return out
        return jax.tree.map(lambda o, a: o if a == unmapped or a >= 0 else jax.numpy.moveaxis(
            o, 0, a), out, jax.tree.broadcast(mark(out_axes), out))

    def traced(*args, **kwargs):
        # What jax.jit traces: a pmap called outside any pmap body.
        for _ in range(8):
            size = plan(args, kwargs)[3]
            mesh, name = top_mesh(size)
            try:
                return run(args, kwargs, mesh, name, (name,))
            except _PmapNeedsAxis as need:
                depth, inner_name, inner_size = need.args
                inner_axes[depth - 1:] = [(inner_name, inner_size)]
        raise ValueError("pmap: the pmaps inside this pmap's body do not settle on a mesh")

    def nested(args, kwargs):
        # A pmap called in a pmap body: an axis of the enclosing mesh, or ask for one.
        mesh, manual = _PMAP_MESHES.frames[-1]
        depth = len(manual)
        name = f"_pmap_axis{depth}" if axis_name is None else axis_name
        if name in manual:
            raise ValueError(f"pmap: axis name {name!r} is already bound by an enclosing pmap")
        if devices is not None:
            raise ValueError("pmap: nested pmaps with devices= are not supported")
        size = plan(args, kwargs)[3]
        names = mesh.axis_names
        if len(names) <= depth or names[depth] != name or mesh.shape[name] != size:
            raise _PmapNeedsAxis(depth, name, size)
        return run(args, kwargs, mesh, name, manual + (name,))

    def moved(args, kwargs):
        # The arguments with each array put where the program wants it (classic pmap moved
        # inputs on other devices; jax.jit refuses them).
        leaves, treedef, axes, size = plan(args, kwargs)
        mesh, name = top_mesh(size)
        placed = iter([
            jax.device_put(leaf, jax.sharding.NamedSharding(mesh, spec(a, name)))
            if isinstance(leaf, jax.Array) else leaf for leaf, a in zip(leaves, axes)])
        dynamic, kw = jax.tree.unflatten(treedef, list(placed))
        rest = iter(dynamic)
        return [args[k] if k in static else next(rest) for k in range(len(args))], kw

    return jax.jit(traced, static_argnums=static, donate_argnums=donate), nested, moved
''', ("jax", "numpy", "functools", "threading", "weakref"))

DEVICE_BUFFERS = Helper("_device_buffers", '''
def _device_buffers(x):
    # Classic x.device_buffers: one array per device, in the sharding's device order;
    # a pmap output's pieces lose the mapped axis, as classic pmap's had none (written
    # by pmapkit migrate).
    shards = list(x.addressable_shards)
    sharding = x.sharding
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return [s.data for s in shards]
    order = {d: k for k, d in enumerate(sharding.mesh.devices.flat)}
    shards.sort(key=lambda s: order[s.device])
    names = sharding.mesh.axis_names
    spec = tuple(sharding.spec)
    if (len(names) == 1 and spec[:1] == (names[0],) and x.ndim
            and x.shape[0] == sharding.mesh.size):
        return [s.data.reshape(s.data.shape[1:]) for s in shards]
    return [s.data for s in shards]
''')

DEVICE_PUT_REPLICATED = Helper("_device_put_replicated", '''
def _device_put_replicated(x, devices):
    # Classic jax.device_put_replicated: a new leading axis of len(devices), slice k
    # on devices[k] (written by pmapkit migrate).
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(numpy.array(devices), ("devices",)),
        jax.sharding.PartitionSpec("devices"))
    return jax.tree.map(
        lambda a: jax.device_put(numpy.stack([numpy.asarray(a)] * len(devices)), sharding), x)
''', ("jax", "numpy"))

DEVICE_PUT_SHARDED = Helper("_device_put_sharded", '''
def _device_put_sharded(shards, devices):
    # Classic jax.device_put_sharded: the shards stacked on a new leading axis, slice
    # k on devices[k] (written by pmapkit migrate).
    if len(shards) != len(devices):
        raise ValueError(f"len(shards) = {len(shards)} must equal len(devices) = {len(devices)}.")
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(numpy.array(devices), ("devices",)),
        jax.sharding.PartitionSpec("devices"))
    return jax.tree.map(
        lambda *xs: jax.device_put(numpy.stack([numpy.asarray(a) for a in xs]), sharding),
        *shards)
''', ("jax", "numpy"))

PJIT = Helper("_pjit", '''
def _pjit(fun, in_shardings=None, out_shardings=None, **options):
    # Classic pjit as jax.jit: a None spec means replicated, and arguments are first
    # put where in_shardings says, as classic pjit moved a committed input laid out
    # otherwise (jax.jit refuses one) (written by pmapkit migrate).
    P = jax.sharding.PartitionSpec

    def spec(s):
        return P() if s is None else s

    def is_spec(s):
        return s is None or isinstance(s, (P, jax.sharding.Sharding))

    if in_shardings is not None:
        in_shardings = jax.tree.map(spec, in_shardings, is_leaf=is_spec)
    if out_shardings is not None:
        out_shardings = jax.tree.map(spec, out_shardings, is_leaf=is_spec)
    jitted = jax.jit(fun, in_shardings=in_shardings, out_shardings=out_shardings, **options)
    if in_shardings is None:
        return jitted
    static = options.get("static_argnums", ())
    static = {static} if isinstance(static, int) else set(static)

    def place(args):   # keyword arguments go through unmoved
        dynamic = [a for k, a in enumerate(args) if k not in static]
        per_argument = isinstance(in_shardings, tuple) and not isinstance(in_shardings, P)
        prefix = in_shardings if per_argument else (in_shardings,) * len(dynamic)
        placed = iter(jax.device_put(
            dynamic, list(jax.tree.broadcast(list(prefix), dynamic, is_leaf=is_spec))))
        return [a if k in static else next(placed) for k, a in enumerate(args)]

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return jitted(*place(args), **kwargs)

    call.lower = lambda *args, **kwargs: jitted.lower(*place(args), **kwargs)
    return call
''', ("jax", "functools"))

WITH_SHARDING_CONSTRAINT = Helper("_with_sharding_constraint", '''
def _with_sharding_constraint(x, shardings):
    # jax.lax.with_sharding_constraint that, as classic pjit's did, raises an
    # error naming the axis when a PartitionSpec has no mesh to refer to: the
    # 0.2/0.3 ValueError and the 0.4 NotImplementedError in one (jax.lax's
    # raises a RuntimeError), the spec printed as they printed it
    # (PartitionSpec(...)) (written by pmapkit migrate).
    P = jax.sharding.PartitionSpec
    if jax.sharding.get_abstract_mesh().empty:
        for spec in jax.tree.leaves(shardings, is_leaf=lambda s: isinstance(s, P)):
            names = [n for entry in spec if entry is not None
                     for n in (entry if isinstance(entry, tuple) else (entry,))]
            if isinstance(spec, P) and names:
                class MeshUndefinedError(ValueError, NotImplementedError):
                    pass
                raise MeshUndefinedError(
                    f"One of with_sharding_constraint arguments was given the resource "
                    f"assignment of PartitionSpec{tuple(spec)!r}, but resource axis "
                    f"{names[0]} is undefined. "
                    "Did you forget to declare the mesh? (JAX 0.4: with_sharding_constraint() "
                    "should only be called inside pjit() (or another traced function such "
                    "as jax.jit).)")
    return jax.lax.with_sharding_constraint(x, shardings)
''')

ID_TAP = Helper("_id_tap", '''
def _id_tap(tap_func, arg, *, result=None, tap_with_device=False):
    # Classic host_callback.id_tap as jax.debug.callback: calls tap_func(arg,
    # transforms) on the host with arg's value (transforms is always () here), with
    # device= the device that taps if tap_with_device (in a migrated pmap each device
    # taps its slice; elsewhere the first device); returns arg, or result if given
    # (written by pmapkit migrate).
    if not tap_with_device:
        jax.debug.callback(lambda value: tap_func(value, ()), arg)
        return arg if result is None else result
    meshes = getattr(globals().get("_PMAP_MESHES"), "frames", None)
    if meshes:
        mesh, manual = meshes[-1]
        count = 1
        for name in manual:
            count *= mesh.shape[name]
        devices = list(mesh.devices.reshape(count, -1)[:, 0])
        jax.debug.callback(lambda value, k: tap_func(value, (), device=devices[int(k)]),
                           arg, jax.lax.axis_index(manual))
    else:
        jax.debug.callback(lambda value: tap_func(value, (), device=jax.devices()[0]), arg)
    return arg if result is None else result
''')

ID_PRINT = Helper("_id_print", '''
def _id_print(arg, *, result=None, tap_with_device=False, **kwargs):
    # Classic host_callback.id_print as jax.debug.print: the keyword arguments
    # (name: value, sorted; device too with tap_with_device, through
    # jax.debug.callback) on one line, then arg's value; returns arg, or result if
    # given (written by pmapkit migrate).
    if not tap_with_device:
        header = " ".join(f"{k}: {v}" for k, v in sorted(kwargs.items()))
        header = header.replace("{", "{{").replace("}", "}}") + "\\n" if header else ""
        jax.debug.print(header + "{}", arg)
        return arg if result is None else result

    def show(value, device):
        shown = dict(kwargs, device=device)
        print(" ".join(f"{k}: {shown[k]}" for k in sorted(shown)) + "\\n" + str(value))
    meshes = getattr(globals().get("_PMAP_MESHES"), "frames", None)
    if meshes:
        mesh, manual = meshes[-1]
        count = 1
        for name in manual:
            count *= mesh.shape[name]
        devices = list(mesh.devices.reshape(count, -1)[:, 0])
        jax.debug.callback(lambda value, k: show(value, devices[int(k)]),
                           arg, jax.lax.axis_index(manual))
    else:
        jax.debug.callback(lambda value: show(value, jax.devices()[0]), arg)
    return arg if result is None else result
''')

ALL = {h.name: h for h in (PMAP, DEVICE_BUFFERS, DEVICE_PUT_REPLICATED, DEVICE_PUT_SHARDED,
                           PJIT, WITH_SHARDING_CONSTRAINT, ID_TAP, ID_PRINT)}

#: Every function and class the helpers define at the top of a file (a migrated
#: file's own copies are not migrated again).
DEFINED = frozenset(re.findall(r"^(?:def|class) (\w+)", "\n".join(h.source for h in ALL.values()),
                               re.MULTILINE))
