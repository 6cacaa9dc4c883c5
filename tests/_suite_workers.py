"""How many pytest-xdist worker processes a run of the suite gets.

The suite is thousands of small compiles, each on one core; spread over the
machine's cores it takes about half as long on two. Only a run that names a
folder is spread (one file, or a test picked by name, starts faster alone), and
never a run inside a worker or inside a test's own pytest (those inherit
``PYTEST_XDIST_WORKER``). ``PMAPKIT_TEST_WORKERS=1`` runs serially; ``-n N`` on
the command line always wins.
"""
import os

#: More workers than this only contend: several tests start four-process runs.
MOST = 4


def count(args, environ, cores):
    """Workers for a run given ``args`` (paths, possibly ``path::test``): 0 for
    a run in one process."""
    if "PYTEST_XDIST_WORKER" in environ:
        return 0
    asked = environ.get("PMAPKIT_TEST_WORKERS", "").strip()
    if asked:
        if not asked.isdigit():
            raise ValueError(f"PMAPKIT_TEST_WORKERS must be a whole number of workers "
                             f"(1: one process); got {asked!r}")
        wanted = int(asked)
    else:
        wanted = min(cores, MOST)
    if wanted < 2 or not any(os.path.isdir(a.split("::")[0]) for a in args):
        return 0
    return wanted


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # no affinity on this platform
        return os.cpu_count() or 1
