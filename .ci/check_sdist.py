"""Checks an sdist's file list: sources in, build products out.

Usage: python .ci/check_sdist.py dist/pmapkit-X.tar.gz <checkout>
Exit status 1 with the list of problems when the sdist is incomplete.
"""
import os
import sys
import tarfile

REQUIRED_TOP = ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in",
                "CHANGELOG.md", "ARCHITECTURE.md", "docs/conf.py")
SHIPPED_SOURCE = (".py", ".pxd", ".pyi")
FORBIDDEN = (".so", ".c", ".pyc", ".html")


def sdist_files(path):
    with tarfile.open(path) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    prefix = os.path.commonprefix(names).split("/")[0] + "/"
    return {name[len(prefix):] for name in names}


def expected_sources(checkout):
    """Every source file of pmapkit/, and every file of tests/, docs/ and
    bench/, stress/ and suites/ (the suite runs the pages' examples and reads their import
    graph), in the checkout."""
    wanted = set()
    for top in ("pmapkit", "tests", "docs", "bench", "stress", "suites"):
        for root, dirs, files in os.walk(os.path.join(checkout, top)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
            for name in files:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, checkout)
                if top != "pmapkit" or name.endswith(SHIPPED_SOURCE) or name == "py.typed":
                    if not name.endswith(FORBIDDEN):
                        wanted.add(rel)
    return wanted


def main(sdist, checkout):
    files = sdist_files(sdist)
    problems = [f"missing {name}" for name in REQUIRED_TOP if name not in files]
    problems += [f"missing {name}" for name in sorted(expected_sources(checkout) - files)]
    problems += [f"build product shipped: {name}" for name in sorted(files)
                 if name.endswith(FORBIDDEN)]
    if problems:
        print("\n".join(problems))
        return 1
    print(f"sdist {os.path.basename(sdist)}: {len(files)} files, "
          "sources, tests, docs and build files all present, no build products")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
