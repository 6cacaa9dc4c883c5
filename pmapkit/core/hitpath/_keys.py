"""The key format: what a cache key of the dispatch core holds, and how it
is read back.

``DispatchFunction._sign*`` (``_dispatch``) writes keys of format
``KEY_VERSION``; ``decode_key`` reads exactly that format, never guessing;
tests/test_cache_keys.py holds a literal key of every form to it, so a change
to one without the other fails there, never silently in
``_debug_cache_keys``. ``same_context`` compares the trace contexts that
select a cache (the other half of what finds an entry).

Compiled by Cython (typed by ``_keys.pxd``) and runnable as plain Python,
like every module of the hit path (``_compiled``).
"""

# Bumped with every change to what ``DispatchFunction._sign*`` puts in a key.
KEY_VERSION = 1
# Marks the keys of calls with keyword arguments: ``f(x, k=y)`` flattens to
# the same treedef as ``f((x,), {"k": y})`` and must not share its entry.
KWARGS_MARK = "**kwargs"
# A list/tuple argument of n leaves in a simple key: ``LIST_MARK - 2 * n`` /
# ``TUPLE_MARK - 2 * n`` (negative: leaf ids are >= 0; the parity tells them
# apart).
LIST_MARK = -2
TUPLE_MARK = -3


def static_entry(where, value):
    """A static argument's key: where it came (its position, or its keyword
    name), its type and its value. The type too: ``1``, ``1.0`` and ``True``
    are ``==`` but trace differently. The one rule for statics: every key of
    pmapkit keys them with it (``_cache_keys`` uses this function)."""
    return (where, type(value), value)


class KeyFormatError(ValueError):
    """A key that is not of the format ``KEY_VERSION`` describes: the
    encoder changed without ``decode_key``."""


def decode_key(key, has_static_argnums):
    """The parts of a key made by ``DispatchFunction._sign*`` (format
    ``KEY_VERSION``), read back exactly, never guessed: a dict of
    ``version``; ``statics`` and ``static_keywords`` (their
    ``static_entry``s); ``kwargs_marked``: the call had keyword arguments
    (``KWARGS_MARK``); ``arguments``: per dynamic positional argument of a
    simple key, ``"leaf"`` or ``("list" | "tuple", n)`` (None for a
    flattened key, whose ``treedef`` is the whole structure);
    ``keywords``: the names of dynamic keyword leaves of a simple key, in
    order; ``leaf_ids``: every dynamic leaf's signature id, in order.
    ``has_static_argnums``: the function has static positions (a flattened
    key then holds their slot). Raises ``KeyFormatError`` for anything
    else."""
    if type(key) is not tuple or not key:
        _bad_key(key, "not a non-empty tuple")
    if type(key[0]) is int:
        return _decode_simple(key)
    return _decode_flattened(key, has_static_argnums)


def _decode_simple(key):
    # (nargs, per argument: a leaf id | a static_entry | a container mark and
    # its leaf ids, [KWARGS_MARK, per keyword: name, leaf id | static_entry])
    nargs = key[0]
    pos = 1
    statics = []
    arguments = []
    leaf_ids = []
    for i in range(nargs):
        if pos >= len(key):
            _bad_key(key, f"ends before argument {i} of {nargs}")
        item = key[pos]
        pos += 1
        if type(item) is tuple:
            if len(item) != 3 or item[0] != i or not isinstance(item[1], type):
                _bad_key(key, f"argument {i}: {item!r} is no static_entry({i}, value)")
            statics.append(item)
        elif type(item) is not int:
            _bad_key(key, f"argument {i}: {item!r} is neither a leaf id, a static "
                     "nor a container mark")
        elif item >= 0:
            arguments.append("leaf")
            leaf_ids.append(item)
        else:
            kind = "list" if (item - LIST_MARK) % 2 == 0 else "tuple"
            n = ((LIST_MARK if kind == "list" else TUPLE_MARK) - item) // 2
            if n < 0:
                _bad_key(key, f"argument {i}: mark {item} encodes no container")
            ids = key[pos:pos + n]
            if len(ids) != n or not all([_is_leaf_id(x) for x in ids]):
                _bad_key(key, f"argument {i}: a {kind} of {n} leaves wants {n} leaf ids")
            arguments.append((kind, n))
            leaf_ids.extend(ids)
            pos += n
    static_kw = []
    keywords = []
    marked = pos < len(key)
    if marked:
        if key[pos] != KWARGS_MARK:
            _bad_key(key, f"item {pos}: {key[pos]!r} after the {nargs} arguments, "
                     "where only KWARGS_MARK may follow")
        pos += 1
        while pos < len(key):
            item = key[pos]
            if type(item) is tuple and len(item) == 3 and type(item[0]) is str:
                static_kw.append(item)
                pos += 1
            elif type(item) is str and pos + 1 < len(key) and _is_leaf_id(key[pos + 1]):
                keywords.append(item)
                leaf_ids.append(key[pos + 1])
                pos += 2
            else:
                _bad_key(key, f"item {pos}: {item!r} is no keyword (a name and its "
                         "leaf id, or a static_entry)")
    return {"version": KEY_VERSION, "statics": tuple(statics),
            "static_keywords": tuple(static_kw), "kwargs_marked": marked,
            "arguments": arguments, "treedef": None, "keywords": keywords,
            "leaf_ids": leaf_ids}


def _decode_flattened(key, has_static_argnums):
    # (treedef, [statics: (static_entry, ...)], [KWARGS_MARK, static
    # keywords: (static_entry, ...)], leaf id, ...)
    treedef = key[0]
    pos = 1
    statics = ()
    if has_static_argnums:
        statics = key[pos] if pos < len(key) else None
        if type(statics) is not tuple or not all(
                [type(e) is tuple and len(e) == 3 and type(e[0]) is int for e in statics]):
            _bad_key(key, f"item 1: {statics!r} is no tuple of positional static_entry's")
        pos += 1
    static_kw = ()
    marked = pos < len(key) and type(key[pos]) is str
    if marked:
        if key[pos] != KWARGS_MARK:
            _bad_key(key, f"item {pos}: {key[pos]!r} where KWARGS_MARK or a leaf id belongs")
        static_kw = key[pos + 1] if pos + 1 < len(key) else None
        if type(static_kw) is not tuple or not all(
                [type(e) is tuple and len(e) == 3 and type(e[0]) is str for e in static_kw]):
            _bad_key(key, f"item {pos + 1}: {static_kw!r} is no tuple of keyword "
                     "static_entry's")
        pos += 2
    leaf_ids = list(key[pos:])
    if not all([_is_leaf_id(x) for x in leaf_ids]):
        _bad_key(key, f"items {pos}..: {leaf_ids!r} are not all leaf ids")
    n_leaves = getattr(treedef, "num_leaves", None)
    if n_leaves is not None and n_leaves != len(leaf_ids):
        _bad_key(key, f"its treedef has {n_leaves} leaves, the key {len(leaf_ids)} leaf ids")
    return {"version": KEY_VERSION, "statics": statics, "static_keywords": static_kw,
            "kwargs_marked": marked, "arguments": None, "treedef": treedef,
            "keywords": [], "leaf_ids": leaf_ids}


def _is_leaf_id(x):
    return type(x) is int and x >= 0


def _bad_key(key, why):
    raise KeyFormatError(
        f"pmapkit internal error: cache key {key!r} is not of key format "
        f"{KEY_VERSION} ({why}); the signing in _dispatch.py changed without "
        "decode_key (bump KEY_VERSION and update both).")


def same_context(cached, ctx):
    """``cached == ctx`` for two trace contexts (tuples, possibly nested one
    level). Compiled, the usual case (nothing changed: the very same item
    objects) is one ``memcmp`` of the two tuples' item pointers
    (``_identical_items``, the C helper ``_keys.pxd`` declares; plain
    Python never gets there and keeps tuple equality)."""
    if not _COMPILED or type(cached) is not tuple:
        return cached == ctx
    a = cached
    b = ctx
    n = len(b)
    if len(a) != n:
        return False
    if _identical_items(a, b, n):
        return True
    return _same_items(a, b, 0)


def _same_items(a, b, start):
    """Item-wise equality from ``start`` on (an item that is not the very
    same object: a nested tuple, or an equal value made anew)."""
    for i in range(start, len(b)):
        x = a[i]
        y = b[i]
        if x is not y:
            if type(x) is tuple and type(y) is tuple:
                if not same_context(x, y):
                    return False
            elif x != y:
                return False
    return True


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
_COMPILED = type(_is_leaf_id).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
