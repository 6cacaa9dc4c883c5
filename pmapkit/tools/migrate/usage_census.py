"""How public classic code calls ``jax.pmap``: counts of call forms, read
from git checkouts of public repositories, each at its last commit before
2024-06-01 (classic JAX; JAX's own repository left out): ``python -m
pmapkit.tools.migrate.usage_census OUT.json OWNER/NAME=GIT_DIR@COMMIT ...``.

Only facts are kept (``usage_census.json``: per form, how many call sites and
how many files use it, and the repositories and commits read); no source text
is kept. Each file is read with :mod:`ast`; a name counts as pmap when the
file's imports make it ``jax.pmap`` (``import jax``, ``from jax import pmap``,
aliases, ``jax.api.pmap``). The pmapped function's body is found when it is a
lambda or a function defined in the same file under the name passed (for
``self.f``, a method ``f``); what the body calls is counted through the
functions it defines inside itself.
"""
from __future__ import annotations

import ast
import collections
import json
import sys

from pmapkit.legacy.census_git import dotted, parse_target, python_files

PARAMS = ("fun", "axis_name")
KEYWORDS = ("axis_name", "in_axes", "out_axes", "static_broadcasted_argnums", "devices",
            "backend", "axis_size", "donate_argnums", "global_arg_shapes")
BODY_CALLS = ("psum", "pmean", "pmax", "pmin", "all_gather", "ppermute", "axis_index",
              "psum_scatter", "all_to_all", "pswapaxes", "pshuffle", "fori_loop", "scan",
              "while_loop", "cond", "switch", "id_tap", "id_print", "grad", "value_and_grad")
PYTREE_KINDS = {"flax.struct.dataclass": "flax struct dataclass",
                "struct.dataclass": "flax struct dataclass",
                "chex.dataclass": "chex dataclass",
                "NamedTuple": "NamedTuple class",
                "register_pytree_node": "register_pytree_node",
                "register_pytree_node_class": "register_pytree_node_class",
                "register_dataclass": "register_dataclass",
                "TrainState": "flax TrainState"}


class _Module:
    def __init__(self, tree):
        self.aliases = {}      # local name -> dotted module or object
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        self.functions = collections.defaultdict(list)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name].append(node)

    def qualified(self, node):
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head not in self.aliases:
            return None
        full = self.aliases[head] + ("." + rest if rest else "")
        return full.replace("jax.api.", "jax.")

    def is_pmap(self, node):
        return self.qualified(node) in ("jax.pmap", "jax.interpreters.pxla.pmap")

    def is_partial(self, node):
        return self.qualified(node) == "functools.partial"


def _axes_form(node):
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        if node.value is None:
            return "None"
        if isinstance(node.value, int):
            return "0" if node.value == 0 else ("negative int" if node.value < 0 else "int > 0")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return "negative int"
    if isinstance(node, (ast.Tuple, ast.List)):
        kinds = {_axes_form(e) for e in node.elts}
        if kinds <= {"0", "None"}:
            return "flat tuple of 0/None"
        if kinds <= {"0", "None", "int > 0", "negative int"}:
            return "flat tuple with other ints"
        return "nested tree"
    if isinstance(node, ast.Dict):
        return "nested tree"
    if isinstance(node, ast.Call) and dotted(node.func) and "Spec" not in dotted(node.func):
        return "nested tree"
    return "a name or expression"


def _body_of(module, fun):
    """(the pmapped function's AST, how it was found) or (None, why)."""
    if isinstance(fun, ast.Lambda):
        return fun, "lambda"
    if isinstance(fun, ast.Call) and module.is_partial(fun.func) and fun.args:
        found, how = _body_of(module, fun.args[0])
        return found, ("partial of " + how) if found is not None else how
    name = fun.attr if isinstance(fun, ast.Attribute) else (
        fun.id if isinstance(fun, ast.Name) else None)
    if name and len(module.functions.get(name, ())) >= 1:
        return module.functions[name][0], "function in the file"
    if isinstance(fun, ast.Call) and module.is_pmap(fun.func):
        return None, "a pmap of a pmap"
    return None, "not in the file"


def _calls_in(module, body):
    seen = set()
    for node in ast.walk(body):
        if isinstance(node, ast.Call):
            name = dotted(node.func) or ""
            last = name.rsplit(".", 1)[-1]
            if last in BODY_CALLS:
                seen.add(last)
            if last == "vmap" and any(k.arg == "axis_name" for k in node.keywords):
                seen.add("vmap with axis_name")
            if module.is_pmap(node.func) or (last == "pmap"):
                seen.add("pmap inside")
    return seen


def _site(module, call, form, params):
    """Counted facts of one call site: ``params`` are the keyword-bound pmap
    arguments (positional ones bound by position)."""
    facts = {"form": form}
    for name in KEYWORDS:
        if name in params:
            facts[name] = True
    for name in ("in_axes", "out_axes"):
        if name in params:
            facts[name + " form"] = _axes_form(params[name])
    if "donate_argnums" in params:
        facts["donate_argnums"] = True
    if "fun" in params:
        body, how = _body_of(module, params["fun"])
        facts["body"] = how
        if body is not None:
            facts["body calls"] = sorted(_calls_in(module, body))
    return facts


def _bind(call, skip_first=False):
    args = list(call.args[1:] if skip_first else call.args)
    params = {}
    names = PARAMS[1:] if skip_first else PARAMS
    for name, value in zip(names, args):
        if isinstance(value, ast.Starred):
            break
        params[name] = value
    for k in call.keywords:
        if k.arg:
            params[k.arg] = k.value
    return params


def sites_of(source):
    """Facts per pmap site of one module's source, and the pytree kinds it uses."""
    tree = ast.parse(source)
    module = _Module(tree)
    sites = []
    handled = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                if module.is_pmap(deco):
                    handled.add(id(deco))
                    facts = {"form": "@jax.pmap", "body": "decorated function",
                             "body calls": sorted(_calls_in(module, node))}
                    sites.append(facts)
                elif (isinstance(deco, ast.Call) and module.is_partial(deco.func) and deco.args
                      and module.is_pmap(deco.args[0])):
                    handled.add(id(deco.args[0]))
                    facts = _site(module, deco, "@partial(jax.pmap, ...)", _bind(deco, True))
                    facts.update({"body": "decorated function",
                                  "body calls": sorted(_calls_in(module, node))})
                    sites.append(facts)
                elif isinstance(deco, ast.Call) and module.is_pmap(deco.func):
                    handled.add(id(deco.func))
                    facts = _site(module, deco, "@jax.pmap(...) (fun omitted)", _bind(deco))
                    facts.update({"body": "decorated function",
                                  "body calls": sorted(_calls_in(module, node))})
                    sites.append(facts)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and module.is_pmap(node.func) and id(node.func) not in handled:
            handled.add(id(node.func))
            params = _bind(node)
            form = "jax.pmap(f, ...)" if "fun" in params else "jax.pmap() without f"
            sites.append(_site(module, node, form, params))
        elif (isinstance(node, ast.Call) and module.is_partial(node.func) and node.args
              and module.is_pmap(node.args[0]) and id(node.args[0]) not in handled):
            handled.add(id(node.args[0]))
            sites.append(_site(module, node, "partial(jax.pmap, ...) as a value", _bind(node, True)))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and module.is_pmap(node) \
                and id(node) not in handled and not isinstance(getattr(node, "ctx", None), ast.Store):
            handled.add(id(node))
            sites.append({"form": "jax.pmap as a value (passed or assigned)"})
    kinds = set()
    text_names = {(dotted(n) or "") for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute))}
    for name, kind in PYTREE_KINDS.items():
        if any(t == name or t.endswith("." + name) for t in text_names):
            kinds.add(kind)
    if any(isinstance(n, ast.ClassDef) and any(
            (dotted(d) or "").endswith("dataclass") or (
                isinstance(d, ast.Call) and (dotted(d.func) or "").endswith("dataclass"))
            for d in n.decorator_list) for n in ast.walk(tree)):
        kinds.add("a dataclass")
    return sites, kinds


def census(targets):
    """Counts over ``targets``: (git dir, commit, name) each."""
    by_form = collections.Counter()
    files_by_form = collections.defaultdict(set)
    kinds_files = collections.defaultdict(set)
    repos = []
    programs = 0
    unparsed = 0
    for git_dir, commit, name in targets:
        count = 0
        for path, blob in python_files(git_dir, commit):
            if "pmap" not in blob:
                continue
            try:
                sites, kinds = sites_of(blob)
            except SyntaxError:
                unparsed += 1
                continue
            if not sites:
                continue
            programs += 1
            where = f"{name}:{path}"
            for facts in sites:
                count += 1
                for key, value in facts.items():
                    values = value if isinstance(value, list) else [value]
                    for v in values:
                        label = key if v is True else f"{key}: {v}"
                        by_form[label] += 1
                        files_by_form[label].add(where)
                by_form["call sites"] += 1
            for kind in kinds:
                kinds_files[kind].add(where)
        repos.append({"repository": name, "commit": commit, "sites": count})
    forms = {label: {"sites": by_form[label], "files": len(files_by_form[label])}
             for label in sorted(by_form)}
    return {"files with a pmap site": programs, "files not parsed": unparsed,
            "repositories": repos, "forms": forms,
            "pytree kinds (files with a pmap site using them)": {
                kind: len(files) for kind, files in sorted(kinds_files.items())}}


def main(argv):
    """``usage_census OUT.json NAME=GIT_DIR@COMMIT ...``."""
    out, *specs = argv
    targets = [parse_target(spec) for spec in specs]
    result = census(targets)
    result["how"] = __doc__.strip().split("\n\n")[0].replace("\n", " ")
    with open(out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
