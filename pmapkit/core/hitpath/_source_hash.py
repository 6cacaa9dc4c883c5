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

#: Each compiled module is built from these two files beside it.
SOURCE_SUFFIXES = (".py", ".pxd")

#: What rebuilds the extensions in a checkout (ARCHITECTURE.md).
REBUILD_COMMAND = "python setup.py build_ext --inplace"


def source_paths(directory, name):
    return [os.path.join(directory, name + suffix) for suffix in SOURCE_SUFFIXES]


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
