"""pjit: ``maps.Mesh`` / ``jax.experimental.PartitionSpec`` → ``jax.sharding``,
``with mesh:`` → ``with jax.set_mesh(mesh):`` (the transformer's ``With``
rule, using ``MESH_MAKERS``), ``pjit`` → ``jax.jit`` (through ``_pjit``
where specs are given: a ``None`` spec is replicated and arguments are put
where the specs say first, as classic pjit moved committed inputs),
``with_sharding_constraint`` → ``jax.lax.with_sharding_constraint``.
``maps.thread_resources.env = maps.ResourceEnv(mesh, ())`` (the classic
global setting of the mesh, no ``with``) becomes ``_resource_mesh(mesh)``,
which keeps the mesh for the thread, and each pjit with specs of that file
``_pjit_resource_mesh(_pjit(...))``, which calls it inside
``jax.set_mesh(kept mesh)``: the mesh is set for the pjit calls only, as
classic pjit read it when called (``global_mesh_blocker`` says where this
cannot be done; there the setting is left with ``GLOBAL_MESH_WHY``)."""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import helpers
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, LeaveAsIs

PJIT_NAMES = ("jax.experimental.pjit.pjit",)
WSC_NAMES = ("jax.experimental.pjit.with_sharding_constraint",)
# Calls whose value, entered with ``with``, is a mesh context.
MESH_MAKERS = ("jax.experimental.maps.Mesh", "jax.sharding.Mesh", "jax.make_mesh",
               "jax.interpreters.pxla.Mesh",
               "jax.experimental.maps.mesh", "jax.experimental.mesh_utils.Mesh")

_PJIT_PARAMS = ("fun", "in_axis_resources", "out_axis_resources", "static_argnums",
                "donate_argnums", "*", "in_shardings", "out_shardings", "static_argnames",
                "donate_argnames", "keep_unused", "device", "backend", "inline",
                "abstracted_axes", "name", "resource_env")


_RENAMES = {"in_axis_resources": "in_shardings", "out_axis_resources": "out_shardings"}


# The classic thread's resource environment, assigned a ResourceEnv to set the
# mesh for the rest of the program (t5x, jaxopt's pjit notebook).
RESOURCE_ENVS = tuple(f"{owner}.thread_resources.env"
                      for owner in ("jax.experimental.maps", "jax.interpreters.pxla"))
RESOURCE_ENV_MAKERS = ("jax.experimental.maps.ResourceEnv",
                       "jax.interpreters.pxla.ResourceEnv")
# jax.set_mesh(mesh) outside a with sets the thread's mesh too, but it is not
# the same program: every jax.jit output and new array is then laid out over
# the whole mesh, where classic JAX kept work outside pjit on one device (in
# jaxopt's pjit notebook its single-device comparison ran 10 times longer).
GLOBAL_MESH_WHY = ("jax.set_mesh(mesh) sets the mesh for the rest of the program, but also "
                   "lays every jax.jit output and new array out over the whole mesh (classic "
                   "JAX kept work outside pjit on one device); set it with "
                   "`with jax.set_mesh(mesh):` around the pjit calls; it is not kept for "
                   "the pjit calls alone here")


def global_mesh_setting(ctx, original):
    """Whether the statement ``original`` is ``<maps>.thread_resources.env =
    <maps>.ResourceEnv(...)``: the classic global setting of the mesh."""
    if len(original.body) != 1 or not isinstance(original.body[0], cst.Assign):
        return False
    assign = original.body[0]
    return (len(assign.targets) == 1
            and ctx.qualname(assign.targets[0].target) in RESOURCE_ENVS
            and isinstance(assign.value, cst.Call)
            and ctx.qualname(assign.value.func) in RESOURCE_ENV_MAKERS)


def _resource_env(statement):
    """{"physical_mesh": Arg, "loops": Arg} of a global setting's ResourceEnv."""
    return sx.bind(statement.body[0].value, ("physical_mesh", "loops"))


def global_mesh_blocker(ctx, module):
    """None where every global setting of ``module`` can become ``_resource_mesh``
    and every pjit ``_pjit_resource_mesh``; else why not (the settings are left)."""
    settings = [s for s in ctx.walk(module, cst.SimpleStatementLine)
                if global_mesh_setting(ctx, s)]
    if not settings:
        return "no global mesh setting"
    for statement in settings:
        try:
            env = _resource_env(statement)
        except sx.Unbindable as exc:
            return f"ResourceEnv({exc})"
        if "physical_mesh" not in env or sx.value(env, "loops", "()") not in ("()", "[]"):
            return "a ResourceEnv with xmap loops has no jax.sharding equivalent"
    targets = {id(s.body[0].targets[0].target) for s in settings}
    imported = {id(n) for i in ctx.walk(module, (cst.Import, cst.ImportFrom))
                for n in ctx.walk(i, (cst.Name, cst.Attribute))}
    calls = {id(c.func): c for c in ctx.walk(module, cst.Call)}
    decorators = {id(d.decorator) for d in ctx.walk(module, cst.Decorator)}
    for node in ctx.walk(module, (cst.Name, cst.Attribute)):
        q = ctx.qualname(node)
        if id(node) in imported or id(node) in targets:
            continue
        if q in RESOURCE_ENVS:
            return ("the program reads thread_resources.env, which outside pjit "
                    "jax.sharding.get_abstract_mesh() would answer with no mesh")
        if q in PJIT_NAMES and id(node) not in decorators:
            if id(node) not in calls:
                return "a pjit not called where it is named (functools.partial, a value)"
            why = _pjit_problem(calls[id(node)])[1]
            if why is not None:
                return why
    return None


def resource_mesh(ctx, updated):
    """The text ``_resource_mesh(mesh)`` for the global setting ``updated``."""
    ctx.need_helper(helpers.RESOURCE_MESH)
    return f"_resource_mesh({sx.code(_resource_env(updated)['physical_mesh'].value)})"


def _pjit_problem(call):
    """(bound arguments, None) for a pjit ``call`` jax.jit can take; else (None, why)."""
    try:
        bound = sx.bind(call, _PJIT_PARAMS)
    except sx.Unbindable as exc:
        return None, f"{exc}; use jax.jit(f, in_shardings=..., out_shardings=...)"
    for name in ("device", "backend", "abstracted_axes", "resource_env", "name"):
        if name in bound:
            return None, (f"pjit's {name}= has no jax.jit equivalent here; use "
                          "jax.jit(f, in_shardings=..., out_shardings=...)")
    if "fun" not in bound:
        return None, "pjit without a function: use jax.jit"
    return bound, None


def _either(bound, classic, modern):
    arg = bound.get(classic)
    return bound.get(modern) if arg is None else arg


def _pjit(ctx, original, updated):
    return _pjit_text(ctx, updated, updated, id(original) in ctx.plans["pjit"].plain)


def partial_pjit(ctx, original, updated):
    """``functools.partial(pjit, ...)``: None unless it is one."""
    if not updated.args or updated.args[0].keyword or updated.args[0].star:
        return None
    if ctx.qualname(original.args[0].value) not in PJIT_NAMES:
        return None
    as_call = updated.with_changes(args=[cst.Arg(cst.Name("f"))] + list(updated.args[1:]))
    plain = id(original) in ctx.plans["pjit"].plain
    head = _pjit_text(ctx, as_call, None, plain)
    args = [updated.args[0].with_changes(value=sx.expr(head))]
    for arg in updated.args[1:]:
        if arg.keyword is not None and arg.keyword.value in _RENAMES:
            arg = arg.with_changes(keyword=cst.Name(_RENAMES[arg.keyword.value]))
        if plain and arg.keyword is not None and arg.keyword.value in _RENAMES.values():
            arg = arg.with_changes(value=_filled(ctx, arg.value))
        args.append(arg)
    return sx.code(updated.with_changes(args=args))


def none(node):
    return isinstance(node, cst.Name) and node.value == "None"


def _filled(ctx, node):
    """A literal spec tree with each ``None`` (classic pjit's replicated) written
    ``P()`` in the file's own name for PartitionSpec."""
    if none(node):
        return sx.expr(ctx.plans["pjit"].replicated).with_changes(lpar=node.lpar, rpar=node.rpar)
    if isinstance(node, (cst.Tuple, cst.List)):
        return node.with_changes(elements=[e.with_changes(value=_filled(ctx, e.value))
                                           for e in node.elements])
    return node


def _pjit_text(ctx, updated, call, plain=False):
    """The text for the pjit call ``updated`` (``call`` None: only the callee's
    text, "jax.jit" or "_pjit", after the checks); ``plain``: the plan proved
    ``jax.jit`` with the specs (a None written ``P()``) lays out its arguments as
    classic pjit did (``pjit_plan``)."""
    bound, why = _pjit_problem(updated)
    if why is not None:
        raise LeaveAsIs(why)
    specs_in = _either(bound, "in_axis_resources", "in_shardings")
    specs_out = _either(bound, "out_axis_resources", "out_shardings")
    ctx.need_import("jax")
    if specs_in is None and specs_out is None:
        return "jax.jit" if call is None else sx.rewrite_call(call, "jax.jit")
    if plain:
        if call is None:
            return "jax.jit"
        args = []
        for k, arg in enumerate(call.args):
            if k and arg.keyword is None:     # jax.jit takes its options by keyword
                arg = arg.with_changes(keyword=cst.Name(_PJIT_PARAMS[k]),
                                       equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                                             cst.SimpleWhitespace("")))
            if arg.keyword is not None and arg.keyword.value in (*_RENAMES,
                                                                 *_RENAMES.values()):
                arg = arg.with_changes(value=_filled(ctx, arg.value))
            args.append(arg)
        return sx.rewrite_call(call.with_changes(args=args), "jax.jit", _RENAMES)
    ctx.need_helper(helpers.PJIT)
    if call is None:
        return "_pjit"
    text = sx.rewrite_call(call, "_pjit", _RENAMES)
    if ctx.resource_mesh:     # the mesh set by the file's global setting, at each call
        ctx.need_helper(helpers.PJIT_RESOURCE_MESH)
        return f"_pjit_resource_mesh({text})"
    return text


def _with_sharding_constraint(ctx, original, updated):
    try:
        bound = sx.bind(updated, ("x", "axis_resources", "*", "shardings"))
    except sx.Unbindable as exc:
        raise LeaveAsIs(f"{exc}; use jax.lax.with_sharding_constraint") from None
    specs = _either(bound, "axis_resources", "shardings")
    if "x" not in bound or specs is None:
        raise LeaveAsIs("needs x and its shardings: use jax.lax.with_sharding_constraint")
    renames = {"axis_resources": "shardings"}
    if ctx.in_try_catching("ValueError") or ctx.in_try_catching("NotImplementedError"):
        # The code catches classic pjit's error for a spec with no mesh (the
        # 0.2/0.3 ValueError or the 0.4 NotImplementedError).
        ctx.need_helper(helpers.WITH_SHARDING_CONSTRAINT)
        return sx.rewrite_call(updated, "_with_sharding_constraint", renames)
    ctx.need_import("jax")
    return sx.rewrite_call(updated, "jax.lax.with_sharding_constraint", renames)


def family():
    partition_spec = "jax.sharding.PartitionSpec"
    return Family(
        "pjit",
        moves={"jax.experimental.maps.Mesh": "jax.sharding.Mesh",
               "jax.experimental.maps.mesh": "jax.sharding.Mesh",
               "jax.experimental.PartitionSpec": partition_spec,
               "jax.experimental.pjit.PartitionSpec": partition_spec,
               "jax.experimental.maps.PartitionSpec": partition_spec,
               "jax.interpreters.pxla.PartitionSpec": partition_spec,
               "jax.interpreters.pxla.Mesh": "jax.sharding.Mesh",
               "jax.experimental.pjit.NamedSharding": "jax.sharding.NamedSharding"},
        # Classic code probed the mesh in context eagerly and inside pjit
        # traces (EasyLM gates its constraints on it): get_abstract_mesh()
        # answers in both (get_mesh() refuses inside jit); it has the
        # probes' .empty, .shape, .axis_names, .size, not .devices.
        names={f"{owner}.thread_resources.env.physical_mesh": "jax.sharding.get_abstract_mesh()"
               for owner in ("jax.experimental.maps", "jax.interpreters.pxla")},
        calls={**{n: _pjit for n in PJIT_NAMES},
               **{n: _with_sharding_constraint for n in WSC_NAMES}},
        classic=("jax.experimental.maps", "jax.experimental.pjit"),
        reasons={"jax.experimental.maps": "jax.experimental.maps is gone; use "
                 "jax.sharding.Mesh and jax.set_mesh(mesh) (jax.sharding.get_abstract_mesh() "
                 "for the mesh in context)",
                 "jax.experimental.pjit": "use jax.jit(f, in_shardings=..., "
                 "out_shardings=...) and jax.lax.with_sharding_constraint"})
