"""The hash a compiled module carries of the sources it was built from.

setup.py stamps it into each extension at build time (a C macro read by the
``.pxd``), and ``_compiled`` compares it with the sources beside the
extension before using it: an extension built from other sources (the
``.py`` edited, no rebuild since) is refused. Imports nothing but the
standard library: setup.py loads this file by path, before pmapkit builds.
"""
import hashlib
import mmap
import os
import re

#: The compiled modules of the hit path, each after the modules it cimports
#: (the order ``_compiled`` loads them in).
MODULES = ("_keys", "_feed", "_lru", "_express", "_miss", "_dispatch", "_shard_arg")

#: Each compiled module is built from these two files beside it, and from the
#: ``.pxd`` of every module it cimports (``cimported``): a declaration changed
#: there changes the C it was compiled against.
SOURCE_SUFFIXES = (".py", ".pxd")

_CIMPORT = re.compile(r"^from\s+pmapkit\.core\.hitpath\.(\w+)\s+cimport\b", re.M)

#: What rebuilds the extensions in a checkout (ARCHITECTURE.md).
REBUILD_COMMAND = "python setup.py build_ext --inplace"


def cimported(directory, name):
    """The hit-path modules ``name``'s ``.pxd`` cimports, and theirs, in
    order of first mention (none when it has no ``.pxd`` there)."""
    found = []
    pending = [name]
    while pending:
        try:
            with open(os.path.join(directory, pending.pop(0) + ".pxd")) as f:
                text = f.read()
        except FileNotFoundError:
            continue
        for other in _CIMPORT.findall(text):
            if other != name and other not in found:
                found.append(other)
                pending.append(other)
    return found


def source_paths(directory, name):
    own = [os.path.join(directory, name + suffix) for suffix in SOURCE_SUFFIXES]
    return own + [os.path.join(directory, other + ".pxd")
                  for other in cimported(directory, name)]


def source_hash(directory, name):
    """SHA-256 (hex) over module ``name``'s sources in ``directory``, or None
    when one is missing (nothing to compare against)."""
    digest = hashlib.sha256()
    for path in source_paths(directory, name):
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                # Length-prefixed: the split between the two files counts too.
                digest.update(size.to_bytes(8, "little"))
                if size:
                    # Hashed from a mapping of the file, not a copy read into
                    # the heap: checked at every import, this leaves malloc's
                    # heap as it was (a freed 45 KB buffer there measurably
                    # changed the allocator's work on later calls).
                    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
                        digest.update(view)
        except FileNotFoundError:
            return None
    return digest.hexdigest()
