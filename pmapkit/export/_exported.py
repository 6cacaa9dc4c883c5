"""``Exported``: the exported-function object of every vintage, as data.

It holds a ``jax.export.Exported`` and reads every vintage's attribute names
off it: the seed's jax2tf ``jax_export`` (``lowering_platform``,
``strict_checks``, ``module_uses_dim_vars``, ``in_shardings`` of the kept
inputs, ...), ``jax.experimental.export`` of the 0.4.2x releases
(``lowering_platforms``, ``disabled_safety_checks``,
``uses_shape_polymorphism``, ...) and ``jax.export`` (``platforms``,
``calling_convention_version``, ``in_shardings_hlo``, ...).

This module is the bottom of ``pmapkit.export``: it imports none of its
siblings. What writes it (``_serialize``) is built on it and gives it its
``serialize`` method from above; the package gives it ``call``, which
imports what runs it (``_call``) on first use.
"""
from __future__ import annotations

from jax import export as jax_export


class Exported:
    """A function lowered to StableHLO for given argument shapes.

    Attributes:
      fun_name: the exported function's name (used in error messages).
      in_tree: the pytree structure of ``(args, kwargs)`` it was exported for.
      in_avals: the flat input abstract values; shapes may hold dimension
        variables.
      out_tree, out_avals: the same for the results.
      in_shardings: the shardings of the inputs the module keeps (those in
        ``module_kept_var_idx``), ``None`` where unspecified; named shardings
        over the export's abstract mesh (as the seed's jax_export had it;
        ``in_shardings_jax(mesh)`` gives every input's).
      out_shardings: one per output, likewise.
      lowering_platform: the (first) platform it was lowered for;
        ``platforms`` (``lowering_platforms``) lists all of them.
      strict_checks: whether the export ran with every safety check on;
        ``disabled_safety_checks`` lists those turned off.
      mlir_module_serialized: the portable StableHLO bytecode.
      module_kept_var_idx: the sorted indices of the inputs the module uses.
      module_uses_dim_vars: whether the module uses dimension variables (shape
        polymorphism) and needs shape refinement before compiling
        (``uses_shape_polymorphism``, ``uses_global_constants``).
      nr_devices: the number of devices it was lowered for.
      calling_convention_version: jax.export's calling-convention version
        (``mlir_module_serialization_version``, ``xla_call_module_version``).
    """

    # _caller is the cache slot of the caller that ``_call`` builds on first use;
    # _unparsed: loaded from an artifact whose module no call has parsed yet
    # (see ``_container.parse_payload``).
    __slots__ = ("_jax", "_caller", "_vjp", "_unparsed", "__weakref__")

    def __init__(self, jax_exported):
        if not isinstance(jax_exported, jax_export.Exported):
            raise TypeError("pmapkit.export.Exported wraps a jax.export.Exported, "
                            f"got {type(jax_exported).__name__}.")
        self._jax = jax_exported
        self._caller = None
        self._vjp = None
        self._unparsed = False

    # -- every vintage -------------------------------------------------------
    @property
    def fun_name(self):
        return self._jax.fun_name

    @property
    def in_tree(self):
        return self._jax.in_tree

    @property
    def in_avals(self):
        return self._jax.in_avals

    @property
    def out_tree(self):
        return self._jax.out_tree

    @property
    def out_avals(self):
        return self._jax.out_avals

    @property
    def nr_devices(self):
        return self._jax.nr_devices

    @property
    def mlir_module_serialized(self):
        return self._jax.mlir_module_serialized

    @property
    def module_kept_var_idx(self):
        return self._jax.module_kept_var_idx

    def mlir_module(self):
        """The StableHLO module as text."""
        return self._jax.mlir_module()

    def has_vjp(self):
        return self._jax.has_vjp()

    def vjp(self):
        """The exported VJP: flat primal inputs, then one cotangent per
        primal output, in; one cotangent per primal input, out."""
        if self._vjp is None:
            if not self._jax.has_vjp():
                raise ValueError(
                    f"No VJP is available: the exported function "
                    f"'{self.fun_name}' has no VJP; it was deserialized from an "
                    "artifact serialized with vjp_order=0 (serialize with "
                    "vjp_order >= 1 to differentiate the loaded function).")
            self._vjp = Exported(self._jax.vjp())
        return self._vjp

    # -- the seed's jax2tf jax_export ------------------------------------------
    @property
    def in_shardings(self):
        all_in = self._jax.in_shardings_jax(None)
        return tuple(all_in[i] for i in self._jax.module_kept_var_idx)

    @property
    def out_shardings(self):
        return tuple(self._jax.out_shardings_jax(None))

    @property
    def lowering_platform(self):
        return self._jax.platforms[0]

    @property
    def strict_checks(self):
        return not self._jax.disabled_safety_checks

    @property
    def module_uses_dim_vars(self):
        return self._jax.uses_global_constants

    @property
    def xla_call_module_version(self):
        return self._jax.calling_convention_version

    # -- jax.experimental.export (0.4.2x) ----------------------------------------
    @property
    def lowering_platforms(self):
        return self._jax.platforms

    @property
    def disabled_safety_checks(self):
        return tuple(self._jax.disabled_safety_checks)

    @property
    def ordered_effects(self):
        return self._jax.ordered_effects

    @property
    def unordered_effects(self):
        return self._jax.unordered_effects

    @property
    def mlir_module_serialization_version(self):
        return self._jax.calling_convention_version

    @property
    def uses_shape_polymorphism(self):
        return self._jax.uses_global_constants

    # -- jax.export ------------------------------------------------------------
    @property
    def platforms(self):
        return self._jax.platforms

    @property
    def calling_convention_version(self):
        return self._jax.calling_convention_version

    @property
    def uses_global_constants(self):
        return self._jax.uses_global_constants

    @property
    def in_shardings_hlo(self):
        return self._jax.in_shardings_hlo

    @property
    def out_shardings_hlo(self):
        return self._jax.out_shardings_hlo

    def in_shardings_jax(self, mesh):
        """Every input's sharding on ``mesh`` (a Mesh or AbstractMesh with the
        export's axis names and sizes); ``None`` where unspecified."""
        return self._jax.in_shardings_jax(mesh)

    def out_shardings_jax(self, mesh):
        return self._jax.out_shardings_jax(mesh)

    def __repr__(self):
        ins = ", ".join(a.str_short() for a in self.in_avals)
        return (f"Exported(fun_name={self.fun_name!r}, in_avals=({ins}), "
                f"platforms={self.platforms}, nr_devices={self.nr_devices})")

    __str__ = __repr__


def to_jax(exported):
    """The ``jax.export.Exported`` behind a pmapkit ``Exported``."""
    if not isinstance(exported, Exported):
        raise TypeError("to_jax: 'exported' must be a pmapkit.export.Exported, "
                        f"got {type(exported).__name__}.")
    return exported._jax


def from_jax(jax_exported):
    """Wrap a ``jax.export.Exported`` (e.g. ``jax.export.deserialize(blob)``
    of a raw jax blob: unchecked bytes, explicitly) as a pmapkit ``Exported``."""
    if not isinstance(jax_exported, jax_export.Exported):
        raise TypeError("from_jax: 'jax_exported' must be a jax.export.Exported, "
                        f"got {type(jax_exported).__name__}.")
    return Exported(jax_exported)
