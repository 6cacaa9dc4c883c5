"""Calling an ``Exported``: argument checks, AD, vmap, and placement.

The flat call is ``custom_vjp(custom_vmap(jax call))``:

- the primal runs jax.export's own call (its primitive and lowering rule,
  which merge the module into the program being built);
- reverse-mode AD runs the exported VJP (``Exported.vjp()``), so a loaded
  artifact differentiates without its Python source;
- vmap maps the call over the batch with ``lax.map``: a compiled module is
  only known at the shapes it was exported for (or their polymorphic
  instances), so each batch element is one call at the per-element shape.

At top level a call runs through one cached ``jax.jit`` per artifact (per
device mesh for a multi-device artifact, with the recorded shardings on the
active pmapkit mesh or on the first N devices), honouring the donation the
artifact's module records.
"""
from __future__ import annotations

import re
import threading

import jax
import numpy as np
from jax import export as jax_export
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.export._exported import PLATFORM_CHECK


def caller_of(exported):
    """The (cached) caller of a pmapkit ``Exported``."""
    caller = exported._caller
    if caller is None:
        caller = exported._caller = _Caller(exported)
    return caller


def call_exported(exported):
    """A function running ``exported`` with the argument pytrees it was
    exported for (the classic spelling of ``exported.call``)."""
    from pmapkit.export._exported import Exported
    if not isinstance(exported, Exported):
        raise TypeError("call_exported: 'exported' must be a pmapkit.export.Exported "
                        f"(use pmapkit.export.from_jax for a jax one), got "
                        f"{type(exported).__name__}.")
    return caller_of(exported)


# -- the flat, differentiable, batchable call ---------------------------------
def _flat_call(exported):
    jexp = exported._jax
    in_tree = jexp.in_tree

    @jax.custom_batching.custom_vmap
    def primal(*flat):
        args, kwargs = in_tree.unflatten(flat)
        return tuple(jax.tree_util.tree_leaves(jexp.call(*args, **kwargs)))

    @primal.def_vmap
    def _batched(axis_size, in_batched, *flat):
        del axis_size
        batched = tuple(x for x, b in zip(flat, in_batched) if b)

        def one(xs):
            it = iter(xs)
            return primal(*[next(it) if b else x for x, b in zip(flat, in_batched)])

        outs = jax.lax.map(one, batched)
        return outs, tuple(True for _ in outs)

    @jax.custom_vjp
    def flat_call(*flat):
        return primal(*flat)

    def fwd(*flat):
        # Through flat_call, not primal: under an outer grad (2nd order) the
        # primal must stay differentiable by this same rule.
        return flat_call(*flat), flat

    def bwd(residuals, cts):
        vjp = exported.vjp()
        n = len(residuals)
        cts = [_fix_float0(ct, aval)
               for ct, aval in zip(cts, vjp.in_avals[n:])]
        return tuple(caller_of(vjp).flat(*residuals, *cts))

    flat_call.defvjp(fwd, bwd)
    return flat_call


def _fix_float0(ct, aval):
    # Integer outputs have float0 cotangents; AD may hand zeros of another dtype.
    if aval.dtype == jax.dtypes.float0 and getattr(ct, "dtype", None) != jax.dtypes.float0:
        return np.zeros(np.shape(ct), dtype=jax.dtypes.float0)
    return ct


# -- argument checks ----------------------------------------------------------
class _Names:
    """``args[0]['w']`` / ``kwargs['y']`` names of flat leaves, on demand."""

    def __init__(self, args, kwargs):
        self._tree = (args, kwargs)
        self._paths = None

    def __call__(self, k):
        if self._paths is None:
            self._paths = [p for p, _ in
                           jax.tree_util.tree_flatten_with_path(self._tree)[0]]
        path = self._paths[k]
        head = "args" if path[0].idx == 0 else "kwargs"
        return head + jax.tree_util.keystr(path[1:])


def _structure_error(exported, args, kwargs, tree):
    exp_args, exp_kwargs = exported.in_tree.unflatten([0] * exported.in_tree.num_leaves)
    where = f"exported function '{exported.fun_name}'"
    if len(args) != len(exp_args):
        detail = (f"it takes {len(exp_args)} positional argument(s), "
                  f"got {len(args)}")
    elif sorted(kwargs) != sorted(exp_kwargs):
        detail = (f"it takes keyword arguments {sorted(exp_kwargs)}, got "
                  f"{sorted(kwargs)}")
    else:
        detail = None
        for i, (a, e) in enumerate(zip(args, exp_args)):
            got = jax.tree_util.tree_structure(a)
            want = jax.tree_util.tree_structure(e)
            if got != want:
                detail = f"args[{i}] has structure {got}, expected {want}"
                break
        if detail is None:
            for key in sorted(kwargs):
                got = jax.tree_util.tree_structure(kwargs[key])
                want = jax.tree_util.tree_structure(exp_kwargs[key])
                if got != want:
                    detail = f"kwargs[{key!r}] has structure {got}, expected {want}"
                    break
        if detail is None:
            detail = f"got {tree}, expected {exported.in_tree}"
    return ValueError(
        f"The call of {where} must pass arguments with the pytree structure it "
        f"was exported for: {detail}.")


def _is_plain_var(dim):
    return jax_export.is_symbolic_dim(dim) and str(dim).isidentifier()


def check_args(exported, args, kwargs):
    """Flat leaves of ``(args, kwargs)``, checked against the export: pytree
    structure, dtypes (TypeError), ranks, constant dimensions and bindings of
    dimension variables (ValueError), each error naming the argument.
    Dimension expressions (``2*b``) are left to jax.export's shape solver,
    which also raises before anything runs."""
    flat, tree = jax.tree_util.tree_flatten((args, kwargs))
    if tree != exported.in_tree:
        raise _structure_error(exported, args, kwargs, tree)
    names = _Names(args, kwargs)
    name = exported.fun_name
    bound = {}
    for k, (x, want) in enumerate(zip(flat, exported.in_avals)):
        try:
            got = jp.shaped_abstractify(x)
        except TypeError:
            raise TypeError(
                f"exported function '{name}': {names(k)} of type "
                f"{type(x).__name__} is not a valid JAX type; expected an array "
                f"{want.str_short()}.") from None
        if got.dtype != want.dtype:
            raise TypeError(
                f"exported function '{name}': {names(k)} has dtype "
                f"{got.dtype} but was exported as {want.str_short()} "
                f"(got {got.str_short()}).")
        if len(got.shape) != len(want.shape):
            raise ValueError(
                f"exported function '{name}': {names(k)} has rank "
                f"{len(got.shape)} but was exported with rank {len(want.shape)}: "
                f"expected shape {tuple(want.shape)}, got {tuple(got.shape)}.")
        for d, (w, g) in enumerate(zip(want.shape, got.shape)):
            if jax_export.is_symbolic_dim(g):
                continue  # a polymorphic caller: jax.export's solver decides
            if not jax_export.is_symbolic_dim(w):
                if w != g:
                    raise ValueError(
                        f"exported function '{name}': {names(k)} has shape "
                        f"{tuple(got.shape)} but was exported with shape "
                        f"{tuple(want.shape)} (dimension {d}: expected {w}, got {g})."
                        + _global_shape_hint(exported))
            elif _is_plain_var(w):
                var = str(w)
                if var in bound and bound[var][0] != g:
                    value, k0, d0 = bound[var]
                    raise ValueError(
                        f"exported function '{name}': inconsistent sizes for "
                        f"dimension variable '{var}': {names(k0)}.shape[{d0}] = "
                        f"{value} but {names(k)}.shape[{d}] = {g} (exported "
                        f"shapes {tuple(exported.in_avals[k0].shape)} and "
                        f"{tuple(want.shape)}).")
                if g < 1:
                    raise ValueError(
                        f"exported function '{name}': {names(k)}.shape[{d}] = {g} "
                        f"binds dimension variable '{var}', which must be >= 1.")
                bound.setdefault(var, (g, k, d))
    return flat


# -- the caller ------------------------------------------------------------------
class _Caller:
    """Runs one Exported: checks, then the flat call (traced) or a cached
    top-level jit (eager)."""

    def __init__(self, exported):
        self.exported = exported
        self.flat = _flat_call(exported)
        self._top = {}
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        exported = self.exported
        flat = check_args(exported, args, kwargs)
        if jp.trace_state_clean() and not any(isinstance(x, jp.Tracer) for x in flat):
            outs = self._run_top_level(flat)
        else:
            outs = self.flat(*flat)
        return exported.out_tree.unflatten(outs)

    # top level -------------------------------------------------------------
    def _run_top_level(self, flat):
        jexp = self.exported._jax
        _check_platform(self.exported)
        mesh = _target_mesh(jexp) if jexp.nr_devices > 1 else None
        runner = self._top.get(mesh)
        if runner is None:
            with self._lock:
                runner = self._top.get(mesh)
                if runner is None:
                    runner = self._top[mesh] = _TopLevel(self, mesh)
        return runner(flat)


class _TopLevel:
    """One jitted runner of an artifact (on one mesh if multi-device)."""

    def __init__(self, caller, mesh):
        exported = caller.exported
        jexp = exported._jax
        flat_call = caller.flat

        def run(*flat):
            return flat_call(*flat)

        run.__name__ = f"exported_{_identifier(exported.fun_name)}"
        donate = _donated_inputs(jexp)
        if mesh is None:
            self.in_shardings = None
            self.fn = jax.jit(run, donate_argnums=donate)
        else:
            replicated = NamedSharding(mesh, PartitionSpec())
            has_mesh = _export_mesh(jexp) is not None
            ins = jexp.in_shardings_jax(mesh) if has_mesh else (None,) * len(jexp.in_avals)
            outs = jexp.out_shardings_jax(mesh) if has_mesh else (None,) * len(jexp.out_avals)
            self.in_shardings = tuple(s or replicated for s in ins)
            out_shardings = tuple(s or replicated for s in outs)
            self.fn = jax.jit(run, in_shardings=self.in_shardings,
                              out_shardings=out_shardings, donate_argnums=donate)

    def __call__(self, flat):
        if self.in_shardings is not None:
            flat = [_placed(x, s) for x, s in zip(flat, self.in_shardings)]
        return self.fn(*flat)


def _global_shape_hint(exported):
    if exported.nr_devices > 1 and jax.process_count() > 1:
        return (" In a multi-process run a multi-device artifact takes global "
                "shapes: pass a global jax.Array, or the whole value (the same "
                "on every process), not this process's slice.")
    return ""


def _placed(x, sharding):
    # jit refuses committed arrays on other devices; move them (as pmapkit's
    # own calls do for inputs sharded otherwise).
    if isinstance(x, jp.Tracer):
        return x
    if isinstance(x, jax.Array):
        if x.sharding.is_equivalent_to(sharding, x.ndim):
            return x
        if sharding.is_fully_addressable or not x.is_fully_addressable:
            return jax.device_put(x, sharding)
    elif sharding.is_fully_addressable:
        return x
    # A multi-process artifact given a host value (or an array of this
    # process only): it is the whole global value, the same on every process
    # (jit refuses such inputs); each process places the parts it holds.
    return _global_from_host(x, sharding)


def _global_from_host(x, sharding):
    value = np.asarray(x)
    value = value.astype(jax.dtypes.canonicalize_dtype(value.dtype), copy=False)
    return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])


def _identifier(name):
    return re.sub(r"\W", "_", name) or "fun"


_DONOR_ATTRS = (b"tf.aliasing_output", b"jax.buffer_donor")


def _donated_inputs(jexp):
    """Flat input indices the module marks donated (``tf.aliasing_output`` /
    ``jax.buffer_donor`` on its main's arguments), for the top-level jit."""
    module_bytes = jexp.mlir_module_serialized
    if not any(attr in module_bytes for attr in _DONOR_ATTRS):
        return ()
    text = jexp.mlir_module()
    match = re.search(r"func\.func public @main\((.*?)\)\s*->", text, re.S)
    if match is None:
        return ()
    params = re.split(r",\s*(?=%arg\d+:)", match.group(1))
    kept = jexp.module_kept_var_idx
    if len(params) != len(kept):
        return ()  # platform-index / dimension / token arguments: no mapping
    return tuple(kept[i] for i, p in enumerate(params)
                 if "tf.aliasing_output" in p or "jax.buffer_donor" in p)


def _check_platform(exported):
    if PLATFORM_CHECK in exported.disabled_safety_checks:
        return
    platform = jax.default_backend()
    platform = {"gpu": "cuda"}.get(platform, platform)
    if platform not in exported.platforms:
        raise ValueError(
            f"The exported function '{exported.fun_name}' was lowered for "
            f"platform(s) {list(exported.platforms)} but is called on "
            f"'{platform}'. Export it for this platform (platforms=[...]) or "
            "with strict_checks=False to allow running it here.")


def _export_mesh(jexp):
    """The abstract mesh of the recorded shardings, or None."""
    for s in (*jexp.in_shardings_jax(None), *jexp.out_shardings_jax(None)):
        if s is not None and getattr(s.mesh, "axis_names", ()):
            return s.mesh
    return None


def _target_mesh(jexp):
    """The concrete mesh a multi-device artifact runs on at top level: the
    active pmapkit mesh (it must have the artifact's device count), else the
    first N devices; shaped like the export's mesh."""
    from pmapkit.mesh import current_mesh
    n = jexp.nr_devices
    abstract = _export_mesh(jexp)
    active = current_mesh()
    if active is not None:
        jmesh = active.jax_mesh
        if jmesh.size != n:
            raise ValueError(
                f"The exported function '{jexp.fun_name}' was lowered for {n} "
                f"devices but the active pmapkit mesh has {jmesh.size} "
                f"({dict(jmesh.shape)}); call it under a mesh of {n} devices "
                "or outside any mesh (it then runs on the first "
                f"{n} devices).")
        if (abstract is not None and jmesh.axis_names == abstract.axis_names
                and tuple(jmesh.axis_sizes) == tuple(abstract.axis_sizes)
                and jmesh.axis_types == abstract.axis_types):
            return jmesh
        devices = list(jmesh.devices.flat)
    else:
        available = jax.devices()
        if len(available) < n:
            raise ValueError(
                f"The exported function '{jexp.fun_name}' was lowered for {n} "
                f"devices but only {len(available)} are available.")
        devices = available[:n]
    if abstract is None:
        return Mesh(np.array(devices, dtype=object), ("exported_devices",))
    grid = np.array(devices, dtype=object).reshape(tuple(abstract.axis_sizes))
    return Mesh(grid, abstract.axis_names, axis_types=abstract.axis_types)
