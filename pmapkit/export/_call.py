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

Arguments are checked first, in jax.export's order and words (pytree
structure, rank, dtype, constant dimensions, dimension variables). This
module is built on ``_exported`` and gives ``Exported`` its ``call``
method; ``call`` / ``call_exported`` are the function spellings.
"""
from __future__ import annotations

import re
import threading

import jax
import numpy as np
from jax import export as jax_export
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.export import _container
from pmapkit.export._exported import Exported
from pmapkit.export._safety import PLATFORM_CHECK
from pmapkit.mesh import current_mesh


def caller_of(exported):
    """The (cached) caller of a pmapkit ``Exported``."""
    caller = exported._caller
    if caller is None:
        caller = exported._caller = _Caller(exported)
    return caller


def call(exported):
    """A function running ``exported`` with the argument pytrees it was
    exported for: ``export.call(exp)(*args)`` of jax.experimental.export,
    ``call_exported(exp)(*args)`` of the seed's jax_export. The same cached
    caller as ``exp.call(*args)``."""
    if not isinstance(exported, Exported):
        hint = (" (a jax.export.Exported: wrap it with pmapkit.export.from_jax)"
                if isinstance(exported, jax_export.Exported) else "")
        raise ValueError("The exported argument must be an export.Exported. "
                         f"Found {exported}{hint}.")
    return caller_of(exported)


call_exported = call


def _exported_call(self, *args, **kwargs):
    """Run the exported function (top level, or inside jit/grad/vmap)."""
    return caller_of(self)(*args, **kwargs)


_exported_call.__name__, _exported_call.__qualname__ = "call", "Exported.call"
Exported.call = _exported_call


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


# -- argument checks (jax.export's order and words) -----------------------------
def _arg_name(exported, k):
    """``args[0]['w']`` / ``kwargs['y']``: flat input ``k`` as jax.export names it."""
    fake = exported.in_tree.unflatten([0] * exported.in_tree.num_leaves)
    path, _ = jax.tree_util.tree_flatten_with_path(fake)[0][k]
    return _path_name(path)


def _path_name(path):
    head = "args" if path[0].idx == 0 else "kwargs"
    return head + jax.tree_util.keystr(path[1:])


def _structure_error(exported, tree):
    got = tree.unflatten([0] * tree.num_leaves)
    want = exported.in_tree.unflatten([0] * exported.in_tree.num_leaves)
    differences = "\n".join(
        f"   - {_path_name(path)} is a {thing1} in the invocation and a "
        f"{thing2} when exported, so {explanation}.\n"
        for path, thing1, thing2, explanation in jp.tree_equality_errors(got, want))
    return ValueError(
        "The invocation args and kwargs must have the same pytree structure "
        f"as when the function '{exported.fun_name}' was exported, but they "
        "have the following structural differences:\n" + differences)


def _has_dim_vars(exported):
    return any(jax_export.is_symbolic_dim(d) for a in exported.in_avals for d in a.shape)


def check_args(exported, args, kwargs, has_dim_vars):
    """Flat leaves of ``(args, kwargs)``, checked against the export before
    anything runs, with jax.export's errors: the pytree structure, then per
    argument its rank, dtype and constant dimensions (ValueError); with
    dimension variables, jax.export's own rule checks all that and solves
    and checks the variables (ValueError too)."""
    flat, tree = jax.tree_util.tree_flatten((args, kwargs))
    if tree != exported.in_tree:
        raise _structure_error(exported, tree)
    avals = []
    for k, (x, want) in enumerate(zip(flat, exported.in_avals)):
        try:
            got = jp.shaped_abstractify(x)
        except TypeError as exc:
            raise TypeError(
                f"{exc} (exported function '{exported.fun_name}', "
                f"{_arg_name(exported, k)}: expected an array "
                f"{want.str_short()}).") from None
        avals.append(got)
        if has_dim_vars:
            continue
        if len(got.shape) != len(want.shape):
            raise ValueError(
                f"Rank mismatch for {_arg_name(exported, k)}: expected "
                f"{want.shape} and called with {got.shape}")
        if got.dtype != want.dtype:
            raise ValueError(
                f"Dtype mismatch for {_arg_name(exported, k)}: expected "
                f"{want.dtype} and called with {got.dtype}")
        for d, (w, g) in enumerate(zip(want.shape, got.shape)):
            if jax_export.is_symbolic_dim(g) or g != w:  # g: a polymorphic caller's
                raise ValueError(
                    f"Shape mismatch for {_arg_name(exported, k)}.shape[{d}] "
                    f"(expected same constant): expected {want.shape} and called "
                    f"with {got.shape}" + _global_shape_hint(exported))
    if has_dim_vars:
        jp.check_exported_call_avals(exported._jax, avals)
    return flat


# -- the caller ------------------------------------------------------------------
class _Caller:
    """Runs one Exported: checks, then the flat call (traced) or a cached
    top-level jit (eager)."""

    def __init__(self, exported):
        self.exported = exported
        self.has_dim_vars = _has_dim_vars(exported)
        self.flat = _flat_call(exported)
        self._top = {}
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        exported = self.exported
        flat = check_args(exported, args, kwargs, self.has_dim_vars)
        if jp.trace_state_clean() and not any(isinstance(x, jp.Tracer) for x in flat):
            if exported._unparsed:
                return self._first_top_level(flat)
            outs = self._run_top_level(flat)
        else:
            outs = self.flat(*flat)
        return exported.out_tree.unflatten(outs)

    def _first_top_level(self, flat):
        # The first compile of a loaded artifact parses its module: a module
        # that does not parse is the artifact's fault (DeserializationError).
        exported = self.exported
        try:
            outs = self._run_top_level(flat)
        except Exception as exc:
            _container.check_module_parses(exported._jax, exc)
            raise
        exported._unparsed = False
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
        return (". In a multi-process run a multi-device artifact takes global "
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
