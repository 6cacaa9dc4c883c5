"""``pmapkit.legacy``: the classic surface. Old JAX code runs without editing its imports.

``install(route_pmap=False)`` puts pmapkit where an older JAX had what JAX
0.10 removed, and only where the running JAX lacks it:

========================================  =============================================
``jax.experimental.pjit``                 ``pjit`` of the classic signature
                                          (``in_axis_resources``/``out_axis_resources``),
                                          ``with_sharding_constraint``, ``PartitionSpec``
``jax.experimental.maps``                 ``pmapkit.pjit.maps`` (``Mesh``, ``mesh``,
                                          ``thread_resources``)
``jax.experimental.PartitionSpec``        ``jax.sharding.PartitionSpec``
``jax.experimental.host_callback``        ``pmapkit.host_callback``
``jax.experimental.jax2tf.jax_export``    ``pmapkit.export`` (the 2023 API)
``jax.experimental.export``               ``pmapkit.export`` (the 0.4.2x API)
``jax.device_put_replicated``,            pmapkit's, where this pmapkit has them
``jax.device_put_sharded``
``jax.pmap`` (``route_pmap=True``)        ``pmapkit.pmap``
========================================  =============================================

A module is provided by a finder at the front of ``sys.meta_path`` when it
does not exist (``import jax.experimental.maps``, ``from jax.experimental
import maps`` and ``from jax.experimental.pjit import pjit`` all work, and the
module becomes an attribute of its parent as an imported one does). A name
is set on its module when that module lacks it. Nothing JAX has is replaced,
with two exceptions where what JAX has is not the old API: JAX 0.10's
``jax.experimental.pjit.pjit`` is a deprecated alias of ``jax.jit`` without
``in_axis_resources`` (it is replaced by the classic pjit on that same
module), and ``jax.experimental.jax2tf`` cannot be imported without
TensorFlow (then a stand-in package holding only ``jax_export`` serves it).
``jax.pmap`` is replaced only when asked (``route_pmap=True``).

Beyond those, the census in ``pmapkit.legacy.names`` (``jax.tree_map`` and
friends, ``jax.ops.index_*``, ``Array.device_buffers``,
``jax.experimental.optimizers/stax``, ``jax.config`` the module, the old array
type names, ...) is installed the same way, and removed names without a
faithful equivalent raise ``RemovedFromJax`` where they are touched. With
``report`` (``pmapkit run --report``, ``PMAPKIT_REPORT=1``) counting stand-ins
record what the program used for ``pmapkit.legacy.report``'s table at exit.

Every public name of five classic releases (0.4.13, 0.4.30, 0.4.38, 0.6.2,
0.9.2: ``census``, data in ``census_data/``) answers: JAX 0.10 has it, or
it is served (the same object where ``jax.extend`` has it, a small adapter
of identical semantics, a served module that is also an attribute of its
parent), or reading it raises ``RemovedFromJax`` naming it, the release
that removed it and the replacement ("JAX internal; no public replacement"
for internals). Refusals are one mechanism: a module ``__getattr__``
chained after JAX's own, driven by the table; a module not imported at
install gets it when the program imports it.

``install`` says on stderr, in one short line, how many names it served
and refused (``pmapkit run --report`` lists them).
``pmapkit run [--route-pmap] script.py`` (``pmapkit.tools.cli``) activates the
layer for the script's whole process tree (``activation``: installed when
each process imports jax) and runs the script as ``__main__``.

The package holds everything about classic names, apart from the core:
``names`` (the table: each removed name, what serves it or why it is
refused, its modern spelling), ``census`` / ``census_collect`` /
``census_check`` (the names of classic releases, how they were collected,
how they answer here), ``classic_values`` and ``positional_sharding``
(what serves the census names), ``report`` (``pmapkit run --report``, the
migration map), ``pmap_sharding`` (the classic ``PmapSharding`` layout
name), the installer itself, and ``migrate`` (``pmapkit migrate``: the
way out, which rewrites classic code to plain modern JAX, taking simple
renames from the census).
"""
__all__ = ["install", "installed"]


def __getattr__(name):
    # The installer imports jax; ``pmapkit.legacy.activation`` (imported by
    # pmapkit's sitecustomize in every process of a ``pmapkit run`` tree)
    # must not, so the package loads it on first use.
    if name in __all__:
        from pmapkit.legacy import _installer
        return getattr(_installer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
