"""Calling an ``Exported``: argument checks, AD, vmap, and placement.

The flat call is ``custom_vjp(custom_vmap(jax call))``:

- the primal runs jax.export's own call (its primitive and lowering rule,
  which merge the module into the program being built);
- reverse-mode AD runs the exported VJP (``Exported.vjp()``), so a loaded
  artifact differentiates without its Python source;
- vmap maps the call over the batch with ``lax.map``: a compiled module is
  only known at the shapes it was exported for (or their polymorphic
  instances), so each batch element is one call at the per-element shape.

At top level a call runs through one cached ``jax.jit`` per artifact, as
jax.export's own call does: on its inputs' devices (committed arrays, else the
active mesh, else the default device), the module's recorded shardings
applied inside; an artifact for N > 1 devices refuses a context of another
size (``DeviceCountError``, a ValueError and a NotImplementedError). It
honours the donation the artifact's module records.

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


def caller_of(exported):
    """The (cached) caller of a pmapkit ``Exported``."""
    caller = exported._caller
    if caller is None:
        caller = exported._caller = _Caller(exported)
    return caller


def call(exported):
    """A function running ``exported`` with the argument pytrees it was
    exported for: ``export.call(exp)(*args)`` of jax.experimental.export,
    ``call_exported(exp)(*args)`` of the seed's jax_export. The cached
    caller of ``exp.call(*args)``, speaking those vintages' words."""
    if not isinstance(exported, Exported):
        hint = (" (a jax.export.Exported: wrap it with pmapkit.export.from_jax)"
                if isinstance(exported, jax_export.Exported) else "")
        raise ValueError("The exported argument must be an export.Exported. "
                         f"Found {exported}{hint}.")
    return caller_of(exported).in_classic_words()


call_exported = call


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
        self._top = None
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

    def in_classic_words(self):
        """This caller, with the shape-polymorphism errors pointing where
        jax_export and jax.experimental.export pointed (jax2tf's README)
        rather than to jax.export's docs (cached: one per caller)."""
        classic = self.__dict__.get("_classic")
        if classic is None:
            classic = self._classic = _ClassicWords(self)
        return classic

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
        # As jax.export's call: the program runs where its inputs are (the
        # devices of the committed arrays, else the active mesh's, else the
        # default device), and an artifact for N > 1 devices refuses a
        # context of another size.
        exported = self.exported
        _check_platform(exported)
        top = self._top
        if top is None:
            with self._lock:
                top = self._top
                if top is None:
                    top = self._top = _top_level_jit(self)
        # A numpy input is read as it is at the call: jax.jit's put aliases
        # an aligned one on CPU (or copies a large one later, on another
        # thread) while the run is queued; one copy of its bytes, here.
        flat = [x.copy() if type(x) is np.ndarray else x for x in flat]
        n = exported.nr_devices
        if n == 1:
            return top(*flat)  # runs on any context (one device, or replicated)
        devices = _context_devices(flat, n)
        if devices is not None and len(devices) != n:
            raise DeviceCountError(exported.fun_name, n, len(devices))
        return top(*_placed_on_context(flat, devices))


_DOCS = "https://docs.jax.dev/en/latest/export/shape_poly.html#"
_JAX2TF_README = "https://github.com/google/jax/blob/main/jax/experimental/jax2tf/README.md#"


class _ClassicWords:
    """A caller whose shape-polymorphism errors name jax2tf's README, as the
    module-level ``call``/``call_exported`` of the earlier vintages did."""

    __slots__ = ("_caller", "__weakref__")

    def __init__(self, caller):
        self._caller = caller

    def __call__(self, *args, **kwargs):
        try:
            return self._caller(*args, **kwargs)
        except ValueError as exc:
            text = str(exc)
            if _DOCS not in text:
                raise
            exc.args = (text.replace(_DOCS, _JAX2TF_README), *exc.args[1:])
            raise


def _top_level_jit(caller):
    """The one top-level jit of an artifact: no shardings of its own, so it
    runs on its inputs' devices; the module's recorded shardings constrain
    inputs and results inside it (jax.export's lowering rule)."""
    exported = caller.exported
    jexp = exported._jax

    def run(*flat):
        # Only ever called eagerly (never under a trace: ``_Caller`` sends
        # traced calls to ``flat``), so it needs none of the AD and vmap
        # rules around the call (the flat call's, jax.export's custom_vjp):
        # jax.export's primitive alone, bound on the checked flat inputs,
        # traced once, which keeps a loaded artifact's first call as cheap
        # as jax.export's own.
        return tuple(jp.call_exported_p.bind(*flat, exported=jexp))

    run.__name__ = f"exported_{_identifier(exported.fun_name)}"
    return jp.jit(run, donate_argnums=_donated_inputs(exported._jax))


class DeviceCountError(ValueError, NotImplementedError):
    """A multi-device artifact called on another number of devices.
    jax.export raised ValueError, jax.experimental.export (0.4.2x)
    NotImplementedError, each in its own words; this is both, saying both."""

    def __init__(self, fun_name, nr_devices, context_devices):
        super().__init__(
            f"Function {fun_name} was exported for {nr_devices} devices and is "
            f"called in a context with {context_devices} devices, which is not "
            f"allowed (Exported module {fun_name} was lowered for {nr_devices} "
            f"devices and is called in a context with {context_devices} devices). "
            f"Call it on arrays placed on {nr_devices} devices (e.g. with "
            "jax.device_put and exported.in_shardings_jax(mesh)) or under a "
            f"mesh of {nr_devices} devices.")


def _committed(x):
    return isinstance(x, jax.Array) and not isinstance(x, jp.Tracer) and x.committed


def _context_devices(flat, nr_devices):
    """The devices a top-level call runs on, in order, as jax.jit picks them:
    the committed inputs' (None where they disagree: jit names the clash),
    else the active mesh's, else the default device. In a multi-process run
    without either, a host value is the whole global value and the artifact
    runs on the first ``nr_devices`` devices of the run."""
    found = None
    for x in flat:
        if _committed(x):
            devices = tuple(x.sharding._device_assignment)
            if found is None:
                found = devices
            elif set(devices) != set(found):
                return None
    if found is not None:
        return found
    from pmapkit.core.sharding.mesh import active_mesh  # multi-device artifacts only
    mesh = active_mesh()
    if mesh is not None:
        return tuple(getattr(mesh, "jax_mesh", mesh).devices.flat)
    if jax.process_count() > 1 and nr_devices > 1:
        return tuple(jax.devices()[:nr_devices])
    return (jax.devices()[0],)


def _placed_on_context(flat, devices):
    """Host values and uncommitted arrays go onto a context of several
    devices (a mesh's, or a multi-process run's) replicated, as jit would
    place them under ``jax.set_mesh``; committed arrays stay where they are."""
    if devices is None or len(devices) == 1 or all(_committed(x) for x in flat):
        return flat
    mesh = Mesh(np.array(devices, dtype=object), ("exported_devices",))
    replicated = NamedSharding(mesh, PartitionSpec())
    out = []
    for x in flat:
        if _committed(x):
            out.append(x)
        elif replicated.is_fully_addressable:
            out.append(jax.device_put(x, replicated))
        else:
            out.append(_global_from_host(x, replicated))
    return out


def _global_shape_hint(exported):
    if exported.nr_devices > 1 and jax.process_count() > 1:
        return (". In a multi-process run a multi-device artifact takes global "
                "shapes: pass a global jax.Array, or the whole value (the same "
                "on every process), not this process's slice.")
    return ""


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
    names = _string_section(module_bytes)
    if names is None:
        names = module_bytes  # a layout not recognized: search all of it
    if not any(attr in names for attr in _DONOR_ATTRS):
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


_BYTECODE_MAGIC = b"ML\xefR"
_STRING_SECTION = 0


def _varint(data, at):
    """MLIR bytecode's prefix varint at ``at``: ``(value, next offset)``
    (the first byte's trailing zeros count the bytes that follow it)."""
    first = data[at]
    if first & 1:
        return first >> 1, at + 1
    extra = 8 if first == 0 else (first & -first).bit_length() - 1
    end = at + 1 + extra
    if end > len(data):
        raise IndexError(at)
    raw = int.from_bytes(data[at:end], "little")
    return (raw >> 8 if first == 0 else raw >> (extra + 1)), end


def _string_section(module_bytes):
    """The string section of a StableHLO bytecode module (every attribute
    name the module holds is one of its strings), found by walking the
    section table; None for any layout not recognized. A module's bulk
    (its constants) lies in other sections: the donation check need not
    read it."""
    data = memoryview(module_bytes)
    if bytes(data[:4]) != _BYTECODE_MAGIC:
        return None
    try:
        _, at = _varint(data, 4)                   # bytecode version
        at = module_bytes.index(b"\0", at) + 1     # producer, NUL-terminated
        while at < len(data):
            header, at = data[at], at + 1
            section, aligned = header & 0x7F, header & 0x80  # high bit: aligned
            length, at = _varint(data, at)
            if aligned:
                alignment, at = _varint(data, at)
                while at < len(data) and data[at] == 0xCB:  # padding bytes
                    at += 1
                if alignment and at % alignment:
                    return None
            if at + length > len(data):
                return None
            if section == _STRING_SECTION:
                return bytes(data[at:at + length])
            at += length
    except (IndexError, ValueError):
        return None
    return None


def _check_platform(exported):
    disabled = exported.disabled_safety_checks
    if disabled:  # (most artifacts disable none: nothing more to import)
        from pmapkit.export._safety import PLATFORM_CHECK
        if PLATFORM_CHECK in disabled:
            return
    platform = jax.default_backend()
    platform = {"gpu": "cuda"}.get(platform, platform)
    if platform not in exported.platforms:
        # Both vintages' words: jax.export's "Function ... was exported for
        # platforms" and jax_export's "The exported function ... was lowered".
        raise ValueError(
            f"The exported function '{exported.fun_name}' was lowered for "
            f"platform(s) {list(exported.platforms)} but is called on "
            f"'{platform}' (Function '{exported.fun_name}' was exported for "
            f"platforms {exported.platforms} but it is used on ('{platform}',)). "
            "Export it for this platform (platforms=[...]) or with "
            "strict_checks=False to allow running it here.")
