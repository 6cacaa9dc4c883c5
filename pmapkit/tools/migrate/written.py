"""The functions ``pmapkit migrate`` writes into a migrated file, as real code:
each is tested here as an importable function, and its source is copied into a
file by ``inspect.getsource`` (``helpers.Helper``) only when a rewrite there
uses it. A migrated file runs on plain JAX, so these use nothing but ``jax``,
``numpy`` and the standard library, and each stays at most 25 lines
(``tests/test_migrate_translate.py`` holds both).
"""
from __future__ import annotations

import functools
import inspect
import logging
import threading

import jax
import jax.experimental
import numpy


def _classic_prng():
    # jax.random draws the streams of JAX before 0.5 (written by pmapkit migrate)
    jax.config.update("jax_threefry_partitionable", False)


def _per_device(fun, in_axes=0, out_axes=0, static=()):
    # Classic pmap's body in a jax.shard_map block (written by pmapkit migrate): a mapped
    # argument loses its device axis at in_axes, a mapped output gets it back at out_axes
    # (None: as it is); static: (position, value) of each static_broadcasted_argnums.
    def per_leaf(axes, tree, change):
        return jax.tree.map(lambda a, t: t if a is None else jax.tree.map(
            lambda v: change(v, a), t), axes, tree, is_leaf=lambda a: a is None)

    @functools.wraps(fun)
    def body(*args):
        args = list(per_leaf(in_axes, args, jax.numpy.squeeze))
        for position, value in sorted(static):
            args.insert(position, value)
        return per_leaf(out_axes, fun(*args), jax.numpy.expand_dims)
    return body


def _first_devices(shard_map, fun, *, mesh, in_specs, **options):
    # Classic pmap ran on the first n devices (written by pmapkit migrate): shard_map over
    # the first devices of mesh, as many along each axis as the arguments' dims in_specs
    # names are long (an axis they do not name, a nested pmap's: the devices left), chosen
    # when jax.jit traces (one trace per size, as pmap compiled).
    def spec(s):
        return isinstance(s, jax.P)

    def call(*args):
        specs = jax.tree.leaves(jax.tree.broadcast(in_specs, args, is_leaf=spec), is_leaf=spec)
        sizes = {}
        for dims, leaf in zip(specs, jax.tree.leaves(args)):
            for dim, name in enumerate(dims):
                sizes.setdefault(name, numpy.shape(leaf)[dim])
        named = int(numpy.prod([sizes.get(name, 1) for name in mesh.axis_names]))
        shape = [sizes.get(name, max(mesh.devices.size // named, 1)) for name in mesh.axis_names]
        count = int(numpy.prod(shape))
        if count > mesh.devices.size:
            raise ValueError(f"compiling computation that requires {count} logical devices, "
                             f"but only {mesh.devices.size} XLA devices are available "
                             f"(num_replicas={count})")
        devices = numpy.reshape(mesh.devices.flat[:count], shape)
        return shard_map(fun, mesh=jax.sharding.Mesh(devices, mesh.axis_names),
                         in_specs=in_specs, **options)(*args)
    return functools.wraps(fun)(call)


def _device_index():
    # The index of the device running this code in its shard_map (a migrated pmap: in
    # jax.local_devices() order), 0 outside one (written by pmapkit migrate).
    axes = tuple(jax.sharding.get_abstract_mesh().manual_axes)
    return jax.lax.axis_index(axes) if axes else numpy.int32(0)


def _id_tap(tap_func, arg, *, result=None, tap_with_device=False, _lock=threading.Lock()):
    # Classic host_callback.id_tap (written by pmapkit migrate): tap_func(value, ()) on the
    # host with numpy arrays, one tap at a time, in program order (an ordered io_callback;
    # under vmap or grad, which refuse one, a jax.debug.callback); with tap_with_device,
    # device= the local device whose slice it is. A tap that raises is logged and the
    # program goes on, as classic taps did. Returns arg, or result if given.
    def run(value, index):
        with _lock:
            device = {"device": jax.local_devices()[int(index)]} if tap_with_device else {}
            try:
                tap_func(jax.tree.map(numpy.asarray, value), (), **device)
            except Exception:
                logging.getLogger("host_callback").exception("the tap %r raised", tap_func)
    try:
        jax.experimental.io_callback(run, None, arg, _device_index(), ordered=True)
    except ValueError:   # "Cannot vmap ordered IO callback", "... do not support JVP"
        jax.debug.callback(run, arg, _device_index())
    return arg if result is None else result


def _id_print(arg, *, result=None, tap_with_device=False, **kwargs):
    # Classic host_callback.id_print (written by pmapkit migrate): the keyword arguments
    # (name: value, sorted; device too with tap_with_device) on one line, then arg's
    # value as numpy prints an array, through _id_tap (one print at a time, in program order).
    def show(value, transforms, **device):
        shown = dict(kwargs, **{k: str(v) for k, v in device.items()})
        text = (numpy.array2string(numpy.asarray(value))
                if isinstance(value, (jax.Array, numpy.ndarray)) else str(value))
        print(" ".join(f"{k}: {shown[k]}" for k in sorted(shown)) + "\n" + text
              if shown else text)
    return _id_tap(show, arg, result=result, tap_with_device=tap_with_device)


def _host_call(callback_func, arg, result_shape, *, with_device=False,
               _lock=threading.Lock()):
    # Classic host_callback.call (written by pmapkit migrate): callback_func(arg) on the
    # host, its result kept whether used or not, one call at a time in program order (an
    # ordered io_callback; under vmap or grad a jax.pure_callback), given numpy arrays;
    # with_device: device= the local device whose slice it is.
    def run(value, index):
        with _lock:
            device = {"device": jax.local_devices()[int(index)]} if with_device else {}
            return callback_func(jax.tree.map(numpy.asarray, value), **device)
    try:
        return jax.experimental.io_callback(run, result_shape, arg, _device_index(),
                                            ordered=True)
    except ValueError:   # "Cannot vmap ordered IO callback", "... do not support JVP"
        return jax.pure_callback(run, result_shape, arg, _device_index(),
                                 vmap_method="sequential")


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
    if (len(names) == 1 and tuple(sharding.spec)[:1] == (names[0],) and x.ndim
            and x.shape[0] == sharding.mesh.size):
        return [s.data.reshape(s.data.shape[1:]) for s in shards]
    return [s.data for s in shards]


def _device_put_replicated(x, devices):
    # Classic jax.device_put_replicated: a new leading axis of len(devices), slice k
    # on devices[k] (written by pmapkit migrate).
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(numpy.array(devices), ("devices",)), jax.P("devices"))
    return jax.tree.map(
        lambda a: jax.device_put(numpy.stack([numpy.asarray(a)] * len(devices)), sharding), x)


def _device_put_sharded(shards, devices):
    # Classic jax.device_put_sharded: the shards stacked on a new leading axis, slice
    # k on devices[k] (written by pmapkit migrate).
    if len(shards) != len(devices):
        raise ValueError(f"len(shards) = {len(shards)} must equal len(devices) = {len(devices)}.")
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(numpy.array(devices), ("devices",)), jax.P("devices"))
    return jax.tree.map(
        lambda *xs: jax.device_put(numpy.stack([numpy.asarray(a) for a in xs]), sharding),
        *shards)


def _pjit(fun, in_shardings=None, out_shardings=None, **options):
    # Classic pjit as jax.jit (written by pmapkit migrate): a None spec is replicated, and
    # positional arguments are first put where in_shardings says, as classic pjit moved a
    # committed input laid out otherwise (jax.jit refuses one); static arguments stay put.
    def spec(s):
        return s is None or isinstance(s, (jax.P, jax.sharding.Sharding))

    def filled(specs):
        return specs and jax.tree.map(lambda s: jax.P() if s is None else s, specs, is_leaf=spec)
    in_shardings, out_shardings = filled(in_shardings), filled(out_shardings)
    jitted = jax.jit(fun, in_shardings=in_shardings, out_shardings=out_shardings, **options)
    nums, names = (options.get(k, ()) for k in ("static_argnums", "static_argnames"))
    static = {nums} if isinstance(nums, int) else set(nums)
    static |= {k for k, p in enumerate(inspect.signature(fun).parameters if names else ())
               if p in ({names} if isinstance(names, str) else set(names))}

    def place(args):   # keyword arguments go through unmoved
        dynamic = [a for k, a in enumerate(args) if k not in static]
        each = in_shardings if isinstance(in_shardings, tuple) else (in_shardings,) * len(dynamic)
        placed = iter(jax.device_put(dynamic, list(jax.tree.broadcast(list(each), dynamic,
                                                                     is_leaf=spec))))
        return [a if k in static else next(placed) for k, a in enumerate(args)]
    call = functools.wraps(fun)(lambda *args, **kwargs: jitted(*place(args), **kwargs))
    call.lower = lambda *args, **kwargs: jitted.lower(*place(args), **kwargs)
    return jitted if in_shardings is None else call


def _resource_mesh(mesh=None, _thread=threading.local()):
    # Classic `maps.thread_resources.env = maps.ResourceEnv(mesh, ())` (written by pmapkit
    # migrate): keeps mesh as this thread's mesh for the pjit calls after it, and no more
    # (jax.set_mesh(mesh) would lay every other array over it too); called without a
    # mesh, it is the mesh kept (None: none yet).
    if mesh is None:
        return getattr(_thread, "mesh", None)
    _thread.mesh = mesh


def _pjit_resource_mesh(jitted):
    # A classic pjit under the mesh _resource_mesh keeps (written by pmapkit migrate):
    # each call, and its lower, runs inside jax.set_mesh(that mesh), as classic pjit read
    # the thread's mesh when called; a mesh already in context (a with) is kept.
    def under(method):
        def call(*args, **kwargs):
            mesh = _resource_mesh()
            if mesh is None or not jax.sharding.get_abstract_mesh().empty:
                return method(*args, **kwargs)
            with jax.set_mesh(mesh):
                return method(*args, **kwargs)
        return functools.wraps(method)(call)
    wrapped = under(jitted)
    if hasattr(jitted, "lower"):
        wrapped.lower = under(jitted.lower)
    return wrapped


def _with_sharding_constraint(x, shardings):
    # jax.lax.with_sharding_constraint that, as classic pjit's did, raises an error naming
    # the axis when a PartitionSpec has no mesh to refer to: the 0.2/0.3 ValueError and
    # the 0.4 NotImplementedError in one (written by pmapkit migrate).
    if jax.sharding.get_abstract_mesh().empty:
        for spec in jax.tree.leaves(shardings, is_leaf=lambda s: isinstance(s, jax.P)):
            names = [n for entry in spec if entry is not None
                     for n in (entry if isinstance(entry, tuple) else (entry,))]
            if isinstance(spec, jax.P) and names:
                class MeshUndefinedError(ValueError, NotImplementedError):
                    pass
                raise MeshUndefinedError(
                    f"One of with_sharding_constraint arguments was given the resource "
                    f"assignment of PartitionSpec{tuple(spec)!r}, but resource axis "
                    f"{names[0]} is undefined. Did you forget to declare the mesh? (JAX 0.4: "
                    "with_sharding_constraint() should only be called inside pjit() (or "
                    "another traced function such as jax.jit).)")
    return jax.lax.with_sharding_constraint(x, shardings)
