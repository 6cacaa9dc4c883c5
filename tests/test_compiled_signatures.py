"""The compiled modules' ``.pyi`` and ``.pxd`` say what their ``.py`` does.

Each compiled module is one ``.py`` (the pure build, and Cython's source)
with two descriptions beside it that nothing else checks: the ``.pxd``
(Cython's declarations: a ``cdef`` method whose parameters differ from the
``.py``'s is a build error at best, a local typed for a name the ``.py`` no
longer has a silent no-op) and the ``.pyi`` (what type checkers and editors
read). Read with ``ast`` (the ``.pxd`` by its declaration lines), they must
agree with the ``.py``:

- every public function, class and method of the ``.py`` is in the ``.pyi``
  with the same parameters (names, kinds, which have defaults), and
  everything the ``.pyi`` declares (private names too) is in the ``.py`` so;
- every ``cdef``/``cpdef`` function or method of the ``.pxd`` is in the
  ``.py`` with the same parameter names, its ``cython.locals`` name names of
  that function, and its ``cdef class``es are classes of the ``.py``;
- a ``cdef class``'s Python-visible attributes (``public``/``readonly``) are
  in the ``.pyi`` class, and the ``.pyi``'s attributes are visible ones.
"""
import ast
import os
import re

import pytest

from pmapkit.core.hitpath import _compiled, _source_hash

HITPATH = os.path.dirname(os.path.abspath(_compiled.__file__))
#: Every compiled module of the hit path (setup.py builds exactly these).
MODULES = _source_hash.MODULES


def _read(name, suffix):
    with open(os.path.join(HITPATH, name + suffix)) as f:
        return f.read()


# -- the .py and the .pyi (ast) ------------------------------------------------

def _params(fn):
    """``fn``'s parameters as (kind, name), and how many have a default."""
    a = fn.args
    out = [("positional-only", p.arg) for p in a.posonlyargs]
    out += [("positional", p.arg) for p in a.args]
    if a.vararg:
        out.append(("*", a.vararg.arg))
    out += [("keyword-only", p.arg) for p in a.kwonlyargs]
    if a.kwarg:
        out.append(("**", a.kwarg.arg))
    defaults = len(a.defaults) + sum(d is not None for d in a.kw_defaults)
    return tuple(out), defaults


def _is_property(fn):
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def _functions(body):
    return {n.name: n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _described(tree):
    """{qualified name: (parameters, defaults, is property)} of the module's
    functions and its classes' methods, and {class name: class node}."""
    found = {}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name, fn in _functions(tree.body).items():
        found[name] = (*_params(fn), _is_property(fn))
    for cname, cls in classes.items():
        for name, fn in _functions(cls.body).items():
            found[f"{cname}.{name}"] = (*_params(fn), _is_property(fn))
    return found, classes


def _module_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _public(qualified):
    return not any(part.startswith("_") for part in qualified.split("."))


def pyi_drift(py_source, pyi_source):
    """How the ``.pyi`` differs from the ``.py`` (empty: they agree)."""
    py_tree, pyi_tree = ast.parse(py_source), ast.parse(pyi_source)
    py, py_classes = _described(py_tree)
    pyi, pyi_classes = _described(pyi_tree)
    problems = []
    for cname in py_classes:
        if _public(cname) and cname not in pyi_classes:
            problems.append(f"class {cname} is not in the .pyi")
    for cname in pyi_classes:
        if cname not in py_classes:
            problems.append(f"class {cname} of the .pyi is not in the .py")
    for name, described in py.items():
        owner = name.split(".")[0]
        if _public(name) and name not in pyi and (owner in pyi_classes or "." not in name):
            problems.append(f"{name}{described[0]} is not in the .pyi")
    for name, described in pyi.items():
        if name not in py:
            problems.append(f"{name} of the .pyi is not in the .py")
        elif py[name] != described:
            problems.append(f"{name}: the .py has {py[name]}, the .pyi {described}")
    for node in pyi_tree.body:
        if isinstance(node, ast.AnnAssign) and node.target.id not in _module_names(py_tree):
            problems.append(f"{node.target.id} of the .pyi is not in the .py")
    return problems


# -- the .pxd (its declaration lines) ------------------------------------------

_DECLARATION = re.compile(
    r"^(?P<kind>cp?def)\s+(?:inline\s+)?(?:(?P<ret>[\w.\[\]]+)\s+)?(?P<name>\w+)\s*"
    r"\((?P<params>.*)\)\s*(?:(?:noexcept|except\s*[^:]*))?:?$")
_ATTRIBUTE = re.compile(r"^cdef\s+(?:(?P<vis>public|readonly)\s+)?[\w.\[\]]+\s+(?P<name>\w+)$")
_CLASS = re.compile(r"^cdef\s+class\s+(?P<name>\w+)\s*(?:\(.*\))?:$")


def _logical_lines(source):
    """``(indent, text)`` per logical line: brackets joined, comments and
    ``cdef extern`` blocks (C code in a string) dropped."""
    lines = []
    pending, depth, indent = "", 0, 0
    skip_below = None
    for raw in source.splitlines():
        text = raw.split("#", 1)[0].rstrip() if '"' not in raw else raw.rstrip()
        if not text.strip():
            continue
        here = len(text) - len(text.lstrip())
        if skip_below is not None:
            if here > skip_below or not pending and text.strip().startswith('"""'):
                continue
            skip_below = None
        if not pending:
            indent = here
            if text.strip().startswith("cdef extern"):
                skip_below = here
                continue
        pending += " " + text.strip()
        depth += text.count("(") - text.count(")")
        if depth <= 0:
            lines.append((indent, pending.strip()))
            pending, depth = "", 0
    return lines


def _split_params(params):
    parts, depth, current = [], 0, ""
    for ch in params:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        current += ch
    if current.strip():
        parts.append(current)
    names, defaults = [], 0
    for part in parts:
        declared, _, default = part.partition("=")
        names.append(re.findall(r"\w+", declared)[-1])
        defaults += bool(default.strip())
    return tuple(names), defaults


def parse_pxd(source):
    """``(functions, classes)``: {qualified name: (parameter names, defaults,
    cython.locals names)}; {class: {attribute: visibility or None}}."""
    functions, classes = {}, {}
    owner, owner_indent, locals_ = None, 0, ()
    for indent, text in _logical_lines(source):
        if owner is not None and indent <= owner_indent:
            owner = None
        if text.startswith("@cython.locals("):
            locals_ = tuple(re.findall(r"(\w+)\s*=", text[len("@cython.locals("):]))
            continue
        match = _CLASS.match(text)
        if match:
            owner, owner_indent = match["name"], indent
            classes[owner] = {}
            continue
        match = _DECLARATION.match(text)
        if match:
            qualified = f"{owner}.{match['name']}" if owner else match["name"]
            functions[qualified] = (*_split_params(match["params"]), locals_)
            locals_ = ()
            continue
        match = _ATTRIBUTE.match(text)
        if match and owner is not None:
            classes[owner][match["name"]] = match["vis"]
        locals_ = ()
    return functions, classes


def _names_in(fn):
    names = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def pxd_drift(py_source, pxd_source, pyi_source):
    """How the ``.pxd`` differs from the ``.py`` and the ``.pyi``."""
    py_tree = ast.parse(py_source)
    py, py_classes = _described(py_tree)
    nodes = dict(_functions(py_tree.body))
    for cname, cls in py_classes.items():
        nodes.update({f"{cname}.{n}": fn for n, fn in _functions(cls.body).items()})
    _, pyi_classes = _described(ast.parse(pyi_source))
    functions, classes = parse_pxd(pxd_source)
    problems = []
    for name, (params, defaults, locals_) in functions.items():
        if name not in py:
            problems.append(f"{name} of the .pxd is not in the .py")
            continue
        py_params, py_defaults, _ = py[name]
        plain = tuple(n for kind, n in py_params if kind in ("positional-only", "positional"))
        if params != plain or defaults != py_defaults or len(plain) != len(py_params):
            problems.append(f"{name}: the .py has {py_params} ({py_defaults} defaults), "
                            f"the .pxd {params} ({defaults} defaults)")
        stale = sorted(set(locals_) - _names_in(nodes[name]))
        if stale:
            problems.append(f"{name}: cython.locals names {stale}, not names of the .py")
    for cname, attributes in classes.items():
        if cname not in py_classes:
            problems.append(f"cdef class {cname} of the .pxd is not in the .py")
            continue
        annotated = {n.target.id for n in getattr(pyi_classes.get(cname), "body", ())
                     if isinstance(n, ast.AnnAssign)}
        properties = {n.split(".")[1] for n, d in py.items()
                      if n.startswith(cname + ".") and d[2]}
        for attr, visibility in attributes.items():
            if visibility and _public(attr) and cname in pyi_classes and attr not in annotated:
                problems.append(f"{cname}.{attr} ({visibility}) is not in the .pyi")
        for attr in annotated - properties:
            if not attributes.get(attr):
                problems.append(f"{cname}.{attr} of the .pyi is not a public or "
                                "readonly attribute in the .pxd")
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_the_pyi_matches_the_py(name):
    assert pyi_drift(_read(name, ".py"), _read(name, ".pyi")) == []


@pytest.mark.parametrize("name", MODULES)
def test_the_pxd_matches_the_py(name):
    assert pxd_drift(_read(name, ".py"), _read(name, ".pxd"), _read(name, ".pyi")) == []


def test_every_compiled_module_has_its_three_files_and_is_built():
    # One list (``_source_hash.MODULES``) names the compiled modules: setup.py
    # builds those, ``_compiled`` loads those, and each has its .py, .pxd and
    # .pyi beside it (what the parity checks above read).
    on_disk = {os.path.splitext(f)[0] for f in os.listdir(HITPATH) if f.endswith(".pxd")}
    assert on_disk == set(MODULES)
    for name in MODULES:
        for suffix in (".py", ".pxd", ".pyi"):
            assert os.path.isfile(os.path.join(HITPATH, name + suffix)), name + suffix
    for name in MODULES:
        module = getattr(_compiled, name.lstrip("_"), None)
        assert module is not None and module.__name__ == f"pmapkit.core.hitpath.{name}"


def test_the_pxd_reader_sees_every_declaration():
    # The reader is checked too: it must find what the .pxd declares, or the
    # parity above would hold vacuously.
    functions, classes = parse_pxd(_read("_dispatch", ".pxd"))
    assert functions["DispatchFunction._dispatch"][:2] == (("self", "args", "kwargs"), 0)
    assert functions["DispatchFunction._sign"][2][:2] == ("nargs", "i")
    assert classes["DispatchFunction"]["_static_set"] is None
    assert set(classes) == {"DispatchFunction"}
    functions, classes = parse_pxd(_read("_lru", ".pxd"))
    assert "cache" in functions["evict"][0]
    assert set(classes) == {"SharedCaches"}
    functions, classes = parse_pxd(_read("_keys", ".pxd"))
    assert functions["static_entry"][:2] == (("where", "value"), 0)
    assert "_identical_items" not in functions and "_built_hash" not in functions
    functions, classes = parse_pxd(_read("_feed", ".pxd"))
    assert classes["CacheEntry"]["ready"] == "public"
    assert set(classes) == {"FastpathData", "LeafTypes", "CacheEntry"}
    assert set(parse_pxd(_read("_miss", ".pxd"))[1]) == {"MissPath"}
    assert set(parse_pxd(_read("_express", ".pxd"))[1]) == {"ExpressCall"}
    for name in MODULES:
        # One per declaration line with a parameter list (outside the
        # ``cdef extern`` blocks, whose lines start otherwise).
        source = _read(name, ".pxd")
        declared = re.findall(r"(?m)^\s*cp?def\s+(?!class\b|extern\b)[^\n]*\(", source)
        assert len(parse_pxd(source)[0]) == len(declared) > 0, name


# -- the miss -> hit contract ----------------------------------------------------

def _init_assigned(py_source, cname):
    cls = next(n for n in ast.parse(py_source).body
               if isinstance(n, ast.ClassDef) and n.name == cname)
    init = _functions(cls.body)["__init__"]
    return [t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id == "self"]


def fastpath_contract_drift(py_source, pxd_source, pyi_source):
    """How ``FastpathData``'s three descriptions differ: the fields the
    ``.py`` sets, the ``.pxd`` declares (all Python-visible) and the ``.pyi``
    annotates must be one set."""
    assigned = _init_assigned(py_source, "FastpathData")
    declared = parse_pxd(pxd_source)[1]["FastpathData"]
    pyi_class = next(n for n in ast.parse(pyi_source).body
                     if isinstance(n, ast.ClassDef) and n.name == "FastpathData")
    annotated = {n.target.id for n in pyi_class.body if isinstance(n, ast.AnnAssign)}
    problems = []
    if len(assigned) != len(set(assigned)):
        problems.append(f"the .py sets a field twice: {assigned}")
    if set(assigned) != set(declared):
        problems.append(f"the .py sets {sorted(set(assigned) - set(declared))} beyond the "
                        f".pxd, which declares {sorted(set(declared) - set(assigned))} unset")
    if set(declared) != annotated:
        problems.append(f"the .pxd and the .pyi differ: {sorted(set(declared) ^ annotated)}")
    hidden = sorted(n for n, vis in declared.items() if vis != "public")
    if hidden:
        problems.append(f"fields the writer cannot set: {hidden}")
    return problems


def test_the_fastpath_contract_is_declared_once():
    py, pxd, pyi = (_read("_feed", s) for s in (".py", ".pxd", ".pyi"))
    assert fastpath_contract_drift(py, pxd, pyi) == []
    assert len(parse_pxd(pxd)[1]["FastpathData"]) == 17


def test_a_field_added_on_one_side_of_the_contract_is_drift():
    py, pxd, pyi = (_read("_feed", s) for s in (".py", ".pxd", ".pyi"))
    edited = _plant(py, "        self.host_refusal = \"not decided\"\n",
                    "        self.host_refusal = \"not decided\"\n        self.extra = None\n")
    assert any("extra" in p for p in fastpath_contract_drift(edited, pxd, pyi))
    edited = _plant(pxd, "    cdef public object program\n", "    cdef object program\n")
    assert any("program" in p for p in fastpath_contract_drift(py, edited, pyi))


def test_the_writer_fills_the_declared_contract_only():
    # The miss path's writer (compiled_program.FastpathData) is the declared
    # structure: on the compiled build a field it does not declare cannot be
    # set at all.
    from pmapkit.core.programs import compiled_program
    assert issubclass(compiled_program.FastpathData, _compiled.feed.FastpathData)
    data = _compiled.feed.FastpathData()
    if _compiled.COMPILED:
        with pytest.raises(AttributeError):
            data.not_a_field = 1
    fields = set(parse_pxd(_read("_feed", ".pxd"))[1]["FastpathData"])
    assert {f for f in fields if hasattr(data, f)} == fields


# -- planted drifts: each is found --------------------------------------------

def _plant(source, old, new):
    assert source.count(old) == 1, old
    return source.replace(old, new)


def test_a_parameter_added_to_the_py_is_drift():
    py, pyi, pxd = (_read("_dispatch", s) for s in (".py", ".pyi", ".pxd"))
    edited = _plant(py, "    def _sign_one(self, x):", "    def _sign_one(self, x, limit):")
    assert any("DispatchFunction._sign_one" in p for p in pxd_drift(edited, pxd, pyi))
    py, pyi = _read("_keys", ".py"), _read("_keys", ".pyi")
    edited = _plant(py, "def decode_key(key, has_static_argnums):",
                    "def decode_key(key, has_static_argnums, strict=False):")
    assert any("decode_key" in p for p in pyi_drift(edited, pyi))


def test_a_renamed_or_missing_declaration_is_drift():
    py, pyi, pxd = (_read("_shard_arg", s) for s in (".py", ".pyi", ".pxd"))
    edited = _plant(pxd, "cpdef object put(self, object x)", "cpdef object put(self, object y)")
    assert any("HostSpec.put" in p for p in pxd_drift(py, edited, pyi))
    edited = _plant(pyi, "    def put(self, x: Any) -> Any: ...\n", "")
    assert any("HostSpec.put" in p for p in pyi_drift(py, edited))


def test_a_stale_local_or_attribute_is_drift():
    py, pyi, pxd = (_read("_lru", s) for s in (".py", ".pyi", ".pxd"))
    edited = _plant(pxd, "@cython.locals(excess=Py_ssize_t, ",
                    "@cython.locals(excess=Py_ssize_t, gone=list, ")
    assert any("'gone'" in p for p in pxd_drift(py, edited, pyi))
    edited = _plant(pxd, "    cdef readonly Py_ssize_t clock\n", "    cdef Py_ssize_t clock\n")
    assert any("SharedCaches.clock" in p for p in pxd_drift(py, edited, pyi))
