"""The census of real use: which ``jax.*`` / ``jaxlib.*`` names public code
reaches, counted from git directories of public repositories, each at a
pinned commit: ``python -m pmapkit.legacy.census_real_use OUT.tsv
OWNER/NAME=GIT_DIR[@COMMIT] ...`` (``census_data/real_use.tsv``; read it
through ``census.real_use()``).

The table in the package reads each repository at its last commit (first
parent) before 2020-10-01, before 2022-01-01 and before 2023-01-01 (before
2024-06-01 where it has none before 2023), each distinct commit once: the
eras of JAX 0.1-0.2, 0.2-0.3 and 0.3-0.4.

Only facts are kept: per dotted name its kind, how many repositories reach
it and which (indices into the list of repositories, commits and commit
dates at the top of the file; a repository read at several commits, one per
era, counts once); no source text. Each ``.py`` file is read with
:mod:`ast`. A name is reached when a file imports it or spells it through
its imports (``from jax.interpreters import batching`` then
``batching.BatchTracer`` is ``jax.interpreters.batching.BatchTracer``),
every dotted prefix with it; a local name (a parameter, an assignment) hides
an import of the same name inside its function. Kinds:

- ``module``: a module (imported as one, imported from, or a module of the
  release census);
- ``config_attr``: an attribute of JAX's config object (``jax.config``,
  ``from jax.config import config``), e.g. ``jax.config.enable_omnistaging``;
- ``config_option``: an option name, ``jax.config:jax_enable_x64``, given to
  ``config.update``/``read`` (or ``getattr``) or read as ``config.jax_...``;
- ``array_member``: ``jax.Array.<name>``, counted BY ATTRIBUTE NAME on any
  object, in files that import JAX, for names distinctive of classic arrays
  (``ARRAY_MEMBERS``; ``.device()`` only where called without arguments);
- ``jaxlib_class``: a capitalised name under ``jaxlib`` or ``jax.lib``;
- ``name``: anything else.
"""
from __future__ import annotations

import ast
import collections
import re
import sys

from pmapkit.legacy.census_git import commit_date, dotted, parse_target, python_files

__all__ = ["ARRAY_MEMBERS", "KINDS", "names_of", "census", "read", "extend", "write", "main"]

KINDS = ("module", "name", "config_attr", "config_option", "array_member", "jaxlib_class")

#: Members of classic ``DeviceArray``/``ShardedDeviceArray``/``jax.Array``
#: whose names are distinctive enough to count on any object.
ARRAY_MEMBERS = frozenset((
    "to_py", "device_buffer", "device_buffers", "block_until_ready", "copy_to_host_async",
    "is_deleted", "unsafe_buffer_pointer", "on_device_size_in_bytes", "addressable_shards",
    "global_shards", "addressable_data", "is_fully_addressable", "is_fully_replicated",
    "local_shards", "sharding_spec", "one_replica_buffer_indices", "weak_type",
    "_npy_value", "xla_shape", "_device", "device"))

# Names of JAX's config object (the attribute, the classic module's object).
_CONFIG_OBJECTS = ("jax.config.config", "jax._src.config.config", "jax.config")
# Methods of the config object whose first argument is an option name.
_TAKES_OPTION = ("update", "read", "_read")
_ROOTS = ("jax", "jaxlib")


def _is_jax(name):
    return name.partition(".")[0] in _ROOTS


def _prefixes(name):
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(2, len(parts) + 1)]


def _locals(func):
    """Names bound in ``func``'s own scope (its parameters, assignments,
    loop and ``with`` targets), not in functions nested in it."""
    bound = set()
    args = func.args
    for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
        if a is not None:
            bound.add(a.arg)
    body = func.body if isinstance(func.body, list) else [func.body]
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return bound


class _Reader(ast.NodeVisitor):
    """Collects the names one module's source reaches (``found``, with
    ``modules``: the names seen imported as or from modules)."""

    def __init__(self):
        self.found = set()        # (name, kind or None)
        self.modules = set()
        self.env = {}             # local name -> qualified name, or None (hidden)
        self.imports_jax = False

    def _add(self, name, kind=None):
        self.found.add((name, kind))

    def _reach(self, full):
        """``full`` and every prefix; a name through JAX's config object is
        its config attribute (and option)."""
        for config in _CONFIG_OBJECTS:
            if full == config or full.startswith(config + "."):
                rest = full[len(config) + 1:].split(".") if full != config else []
                self._add("jax.config")
                if config == "jax.config.config":
                    self._add("jax.config.config")
                if rest:
                    self._config_attr(rest[0])
                    if rest[0] in ("FLAGS", "flags", "values", "_values") and len(rest) > 1:
                        self._option(rest[1])
                return
        for prefix in _prefixes(full):
            self._add(prefix)

    def _config_attr(self, attr):
        if attr.startswith("jax_"):
            self._option(attr)
        else:
            self._add(f"jax.config.{attr}", "config_attr")

    def _option(self, option):
        if option.startswith("jax_"):
            self._add(f"jax.config:{option}", "config_option")

    def qualified(self, node):
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        target = self.env.get(head)
        if target is None:
            return None
        return target + ("." + rest if rest else "")

    # -- imports --
    def visit_Import(self, node):
        for alias in node.names:
            if not _is_jax(alias.name):
                if alias.asname:
                    self.env[alias.asname] = None
                continue
            self.imports_jax = True
            for prefix in _prefixes(alias.name):
                self.modules.add(prefix)
            self._reach(alias.name)
            if alias.asname:
                self.env[alias.asname] = alias.name
            else:
                root = alias.name.partition(".")[0]
                self.env[root] = root

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level or not _is_jax(module):
            for alias in node.names:
                self.env[alias.asname or alias.name] = None
            return
        self.imports_jax = True
        self.modules.add(module)
        for prefix in _prefixes(module):
            self.modules.add(prefix)
        if module != node.module.partition(".")[0]:
            self._reach(module)
        for alias in node.names:
            if alias.name == "*":
                continue
            full = f"{module}.{alias.name}"
            self._reach(full)
            self.env[alias.asname or alias.name] = full

    # -- scopes --
    def _scoped(self, node, bound):
        saved = self.env
        self.env = dict(saved)
        for name in bound:
            self.env[name] = None
        self.generic_visit(node)
        self.env = saved

    def visit_FunctionDef(self, node):
        for d in node.decorator_list:
            self.visit(d)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            if a.annotation is not None:
                self.visit(a.annotation)
        if node.returns is not None:
            self.visit(node.returns)
        saved = self.env
        self.env = dict(saved)
        for name in _locals(node):
            self.env[name] = None
        for stmt in node.body:
            self.visit(stmt)
        self.env = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)
        saved = self.env
        self.env = dict(saved)
        for name in _locals(node):
            self.env[name] = None
        self.visit(node.body)
        self.env = saved

    # -- uses --
    def visit_Attribute(self, node):
        full = self.qualified(node)
        if full is not None:
            if _is_jax(full):
                self._reach(full)
            return
        if node.attr in ARRAY_MEMBERS and node.attr != "device":
            self._add(f"jax.Array.{node.attr}", "array_member")
        self.visit(node.value)

    def visit_Name(self, node):
        full = self.env.get(node.id)
        if full is not None and _is_jax(full):
            self._reach(full)

    def visit_Call(self, node):
        func = node.func
        full = self.qualified(func) if isinstance(func, (ast.Attribute, ast.Name)) else None
        if full is not None:
            owner, _, method = full.rpartition(".")
            if owner in _CONFIG_OBJECTS and method in _TAKES_OPTION:
                self._option_arg(node)
        elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
            target = self.qualified(node.args[0]) if isinstance(
                node.args[0], (ast.Attribute, ast.Name)) else None
            if target in _CONFIG_OBJECTS:
                self._option_arg(node, 1)
        elif (isinstance(func, ast.Attribute) and func.attr == "device" and not node.args
              and not node.keywords and self.imports_jax):
            self._add("jax.Array.device", "array_member")
        self.generic_visit(node)

    def _option_arg(self, call, position=0):
        if len(call.args) > position:
            arg = call.args[position]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self._option(arg.value)


def names_of(source):
    """``({(name, kind or None)}, {modules})`` reached by one module's source."""
    tree = ast.parse(source)
    reader = _Reader()
    # module-level imports first, so a use above a late import still resolves
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            reader.visit(node)
    reader.visit(tree)
    if not reader.imports_jax:
        return set(), set()
    return reader.found, reader.modules


def _kind(name, stated, modules):
    if stated:
        return stated
    if name in modules:
        return "module"
    last = name.rpartition(".")[2]
    if name.startswith(("jaxlib.", "jax.lib.")) and last[:1].isupper():
        return "jaxlib_class"
    return "name"


def _census_modules():
    from pmapkit.legacy import census
    from pmapkit.legacy.census_modules import ERA_MODULES, PUBLIC_MODULES
    known = set(PUBLIC_MODULES) | set(ERA_MODULES)
    known.update(m for m, _ in census.union())
    known.update(census._module_facts())
    return known


def census(targets, first=0):
    """``(sources, rows, files not parsed)``: ``sources`` one ``(OWNER/NAME,
    commit, date)`` per target (a repository may be read at several
    commits), ``rows`` ``{name: (kind, [source indices])}``; the indices
    start at ``first`` (targets added to a table of ``first`` sources)."""
    sources = []
    reached = collections.defaultdict(set)
    stated = {}
    modules = _census_modules()
    unparsed = 0
    for index, (git_dir, commit, name) in enumerate(targets, first):
        sources.append((name, commit, commit_date(git_dir, commit)))
        for _, text in python_files(git_dir, commit):
            if "jax" not in text:
                continue
            try:
                found, seen_modules = names_of(text)
            except (SyntaxError, ValueError, RecursionError):
                unparsed += 1
                continue
            modules |= seen_modules
            for full, kind in found:
                reached[full].add(index)
                if kind:
                    stated[full] = kind
    rows = {full: (_kind(full, stated.get(full), modules), sorted(repos))
            for full, repos in reached.items()}
    return sources, rows, unparsed


def read(path):
    """``(sources, rows, files not parsed)`` of a table ``write`` wrote."""
    sources, rows, unparsed = [], {}, 0
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            found = re.search(r"; (\d+) files not parsed", line) if line[0] == "#" else None
            if found:
                unparsed = int(found.group(1))
            if line[0] == "#" or not line.strip():
                continue
            if fields[0] == "source":
                sources.append(tuple(fields[2:5]))
            elif fields[0] != "name":
                rows[fields[0]] = (fields[1], _indices(fields[3]))
    return sources, rows, unparsed


def _indices(spans):
    out = []
    for run in spans.split(","):
        first, _, last = run.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def extend(path, targets):
    """The table at ``path`` with ``targets`` read and added (their sources
    after the ones it has): ``(sources, rows, files not parsed)``. A
    repository the table already reads is not read again, and a new one
    whose code reaches no JAX name is not counted as read."""
    sources, rows, unparsed = read(path)
    have = {s[0] for s in sources}
    targets = [t for t in targets if t.name not in have]
    added, new_rows, new_unparsed = census(targets, len(sources))
    reaching = {i for _, ids in new_rows.values() for i in ids}
    keep = [k for k in range(len(added)) if len(sources) + k in reaching]
    renumber = {len(sources) + k: len(sources) + j for j, k in enumerate(keep)}
    sources = sources + [added[k] for k in keep]
    for name, (kind, ids) in new_rows.items():
        old_kind, old_ids = rows.get(name, (kind, []))
        rows[name] = (old_kind if name in rows else kind,
                      sorted(set(old_ids) | {renumber[i] for i in ids}))
    return sources, rows, unparsed + new_unparsed


def _spans(indices):
    out, start = [], None
    for k, i in enumerate(indices):
        if start is None:
            start = i
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            out.append(f"{start}" if start == i else f"{start}-{i}")
            start = None
    return ",".join(out)


def write(out, sources, rows, unparsed=0, command=""):
    with open(out, "w") as f:
        f.write("# The census of real use: the jax.*/jaxlib.* names public code reaches "
                "(pmapkit.legacy.census_real_use; read through census.real_use()).\n")
        f.write(f"# {len({s[0] for s in sources})} repositories read at {len(sources)} "
                f"pinned commits (named below); {unparsed} files not parsed.\n")
        if command:
            f.write(f"# rebuilt by: {command}\n")
        f.write("# source\tindex\trepository\tcommit\tcommit date\n")
        for k, (name, commit, date) in enumerate(sources):
            f.write(f"source\t{k}\t{name}\t{commit}\t{date}\n")
        f.write("name\tkind\trepos\trepo_ids\n")
        def repos(name):
            return len({sources[i][0] for i in rows[name][1]})
        for name in sorted(rows, key=lambda n: (-repos(n), n)):
            kind, ids = rows[name]
            f.write(f"{name}\t{kind}\t{repos(name)}\t{_spans(ids)}\n")


#: The eras the package's table reads: each repository's last commit before
#: each date (the last one: before ``LATE_FALLBACK`` where none is earlier).
ERA_ENDS = ("2020-10-01", "2022-01-01", "2023-01-01")
LATE_FALLBACK = "2024-06-01"


def era_targets(spec):
    """The targets of ``OWNER/NAME=GIT_DIR`` (no commit): one per distinct
    era commit (``ERA_ENDS``)."""
    name, _, git_dir = spec.partition("=")
    commits = []
    for end in ERA_ENDS:
        commit = _last_before(git_dir, end)
        if not commit and end == ERA_ENDS[-1]:
            commit = _last_before(git_dir, LATE_FALLBACK)
        if commit and commit not in commits:
            commits.append(commit)
    return [parse_target(f"{name}={git_dir}@{c}") for c in commits]


def _last_before(git_dir, date):
    import subprocess
    return subprocess.run(["git", f"--git-dir={git_dir}", "rev-list", "-1", "--first-parent",
                           f"--before={date}", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv=None):
    """``census_real_use [--add] OUT.tsv OWNER/NAME=GIT_DIR[@COMMIT] ...``: a
    target without a commit is read at its era commits (``era_targets``);
    ``--add``: the repositories are added to the table OUT.tsv holds."""
    argv = list(sys.argv[1:] if argv is None else argv)
    add = argv[:1] == ["--add"]
    argv = argv[1:] if add else argv
    if len(argv) < 2:
        print("usage: python -m pmapkit.legacy.census_real_use [--add] OUT.tsv "
              "OWNER/NAME=GIT_DIR[@COMMIT] ...", file=sys.stderr)
        return 2
    out, *specs = argv
    targets = []
    for spec in specs:
        targets += [parse_target(spec)] if "@" in spec.partition("=")[2] else era_targets(spec)
    sources, rows, unparsed = extend(out, targets) if add else census(targets)
    write(out, sources, rows, unparsed,
          "python -m pmapkit.legacy.census_real_use [--add] OUT.tsv OWNER/NAME=GIT_DIR ... "
          "(each at its era commits; OWNER/NAME=GIT_DIR@COMMIT for one commit; --add: "
          "added to the table OUT.tsv holds)")
    print(f"{len({s[0] for s in sources})} repositories at {len(sources)} commits, "
          f"{len(rows)} names, {unparsed} files not parsed "
          f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
