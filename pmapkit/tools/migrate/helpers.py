"""Small functions ``pmapkit migrate`` writes into a migrated file where one
expression cannot say what the classic API did (plain jax 0.10 only: the
migrated file must run without pmapkit).

Each helper is source text plus the modules it needs at the top of the file.
A helper is written once per file, after its imports, and only when a rewrite
in that file uses it; a file that defines the name already keeps its own.
"""
from __future__ import annotations

import dataclasses


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
_PMAPS = {}
_PMAP_MESHES = []


def _pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, devices=None, donate_argnums=()):
    # jax.pmap with in_axes 0/None and out_axes 0 as jax.jit of jax.shard_map over a
    # 1-D mesh of the devices (written by pmapkit migrate). Like classic pmap, the
    # body sees each device's slice without the mapped axis, and a pmap of an equal
    # function (same code, globals and captured values) made anew reuses the compiled
    # program.
    if out_axes != 0:
        raise ValueError(f"_pmap: out_axes must be 0, got {out_axes!r}")
    code = getattr(fun, "__code__", None)
    # The entry keeps the captured values alive, so their ids stay theirs.
    try:
        captured = () if code is None else (
            fun.__globals__, *(fun.__defaults__ or ()),
            *(c.cell_contents for c in fun.__closure__ or ()))
    except ValueError:  # a cell not yet filled: this function shares nothing
        code, captured = None, ()
    key = (fun if code is None else (code, tuple(map(id, captured))),
           axis_name, repr(in_axes), None if devices is None else tuple(devices),
           repr(donate_argnums))
    found = _PMAPS.get(key)
    if found is not None:
        return found[1]
    axis = "_pmap_axis" if axis_name is None else axis_name
    programs = {}

    def program(n, axes):
        chosen = jax.local_devices()[:n] if devices is None else devices
        if len(chosen) != n:
            raise ValueError(f"pmap: a mapped axis of size {n} needs {n} devices, "
                             f"but only {len(chosen)} are available")
        mesh = jax.sharding.Mesh(numpy.array(chosen), (axis,))

        def body(*blocks):
            def unmapped(block):
                if block.shape[0] != 1:
                    raise ValueError(
                        f"pmap: mapped axis of size {block.shape[0] * n} for {n} devices")
                return block.reshape(block.shape[1:])
            args = [b if a is None else jax.tree.map(unmapped, b)
                    for b, a in zip(blocks, axes)]
            _PMAP_MESHES.append(mesh)   # for _id_tap(..., tap_with_device=True)
            try:
                out = fun(*args)
            finally:
                _PMAP_MESHES.pop()
            return jax.tree.map(lambda o: jax.numpy.expand_dims(o, 0), out)

        P = jax.sharding.PartitionSpec
        return jax.jit(jax.shard_map(
            body, mesh=mesh, in_specs=tuple(P() if a is None else P(axis) for a in axes),
            out_specs=P(axis)), donate_argnums=donate_argnums)

    # The last call's (argument count, first mapped position, its size, program):
    # a call like it goes straight to the compiled program.
    last = [None, 0, None, None]

    def slow(args):
        if _PMAP_MESHES:
            raise NotImplementedError(
                "a pmap inside a pmap: jax.shard_map does not nest this way on this JAX; "
                "write one jax.shard_map over a 2-D mesh (axis names of both pmaps)")
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        mapped_at = [k for k, a in enumerate(axes) if a is not None]
        leaves = [leaf for k in mapped_at for leaf in jax.tree.leaves(args[k])]
        if not leaves:
            raise ValueError("pmap needs at least one argument mapped over axis 0")
        n = len(devices) if devices is not None else numpy.shape(leaves[0])[0]
        jitted = programs.get((n, axes))
        if jitted is None:
            jitted = programs[n, axes] = program(n, axes)
        if not isinstance(args[mapped_at[0]], (list, tuple, dict)):
            last[:] = [len(args), mapped_at[0], numpy.shape(args[mapped_at[0]])[0], jitted]
        return jitted(*args)

    @functools.wraps(fun)
    def mapped(*args):
        count, at, size, jitted = last
        if len(args) == count and getattr(args[at], "shape", (None,))[0] == size:
            return jitted(*args)
        return slow(args)

    if len(_PMAPS) > 512:
        _PMAPS.clear()
    _PMAPS[key] = (fun, mapped, captured)
    return mapped
''', ("jax", "numpy", "functools"))

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
    meshes = globals().get("_PMAP_MESHES")
    if meshes:
        devices = list(meshes[-1].devices.flat)
        jax.debug.callback(lambda value, k: tap_func(value, (), device=devices[int(k)]),
                           arg, jax.lax.axis_index(meshes[-1].axis_names[0]))
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
    meshes = globals().get("_PMAP_MESHES")
    if meshes:
        devices = list(meshes[-1].devices.flat)
        jax.debug.callback(lambda value, k: show(value, devices[int(k)]),
                           arg, jax.lax.axis_index(meshes[-1].axis_names[0]))
    else:
        jax.debug.callback(lambda value: show(value, jax.devices()[0]), arg)
    return arg if result is None else result
''')

ALL = {h.name: h for h in (PMAP, DEVICE_BUFFERS, DEVICE_PUT_REPLICATED, DEVICE_PUT_SHARDED,
                           PJIT, WITH_SHARDING_CONSTRAINT, ID_TAP, ID_PRINT)}
