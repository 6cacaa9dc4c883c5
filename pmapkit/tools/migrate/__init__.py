"""``pmapkit migrate``: rewrite classic JAX code to plain jax 0.10 public API.

A way out of ``pmapkit run``: the output never imports pmapkit. Built on
libcst, so comments and formatting outside rewritten expressions stay as
written. Modules:

- ``rules_trees_ops``, ``rules_placement``, ``rules_pjit``,
  ``rules_host_callback``, ``rules_export``, ``rules_pmap``, ``rules_modern``
  (deprecated modern spellings): the rules by family (``base.Family``), keyed
  by qualified classic names; ``deprecations``: JAX's own deprecation tables;
- ``helpers``: the small functions written into a migrated file where one
  expression cannot say what the classic API did;
- ``transformer``: the libcst pass that applies them (``migrate_module``);
- ``leftovers``: the scan of the output behind "0 left";
- ``report``: what was rewritten, left and kept; ``check``: ``--check``'s
  comparison and verdicts; ``check_runs``: its two runs, each in a temporary
  copy of the program's folder;
- ``files``: reading sources as Python does, atomic writes (links, owners,
  hard links), output folders;
- ``command``: the command line.
"""
__all__ = ["migrate_module", "migrate_source"]


def migrate_source(source, path="<string>"):
    """(migrated source, ``report.FileReport``) for Python source text."""
    from pmapkit.tools.migrate.transformer import migrate_module
    return migrate_module(source, path)


def __getattr__(name):
    # The rules read this JAX (``leftovers``, the census): ``migrate_module``
    # loads them on first use, so ``pmapkit migrate --help`` needs no jax.
    if name == "migrate_module":
        from pmapkit.tools.migrate.transformer import migrate_module
        globals()[name] = migrate_module
        return migrate_module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"migrate_module"})
