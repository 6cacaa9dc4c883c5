"""Python sources of public repositories read at a pinned commit straight
from their git directories (no checkout): what the censuses of public code
(``census_real_use``, ``pmapkit.tools.migrate.usage_census``) read.

A target is written ``OWNER/NAME=GIT_DIR@COMMIT`` on their command lines.
"""
from __future__ import annotations

import ast
import subprocess
import typing

__all__ = ["Target", "parse_target", "python_files", "commit_date", "dotted"]


class Target(typing.NamedTuple):
    """One repository read: its git directory, the commit, ``OWNER/NAME``."""
    git_dir: str
    commit: str
    name: str


def parse_target(spec: str) -> Target:
    """The ``Target`` of ``OWNER/NAME=GIT_DIR@COMMIT``."""
    name, eq, rest = spec.partition("=")
    git_dir, at, commit = rest.rpartition("@")
    if not (eq and at and name and git_dir and commit):
        raise ValueError(f"a target must be OWNER/NAME=GIT_DIR@COMMIT; got {spec!r}")
    return Target(git_dir, commit, name)


def _git(git_dir, *args, **kwargs):
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True,
                          check=True, **kwargs).stdout


def commit_date(git_dir: str, commit: str) -> str:
    """The commit's date, ``YYYY-MM-DD`` (committer's)."""
    return _git(git_dir, "show", "-s", "--format=%cs", commit, text=True).strip()


def python_files(git_dir: str, commit: str, skip=lambda path: False):
    """``(path, text)`` of every ``.py`` file at ``commit`` (text decoded as
    UTF-8, undecodable bytes replaced), but those ``skip(path)`` leaves out;
    read in one ``git cat-file --batch`` process."""
    listed = _git(git_dir, "ls-tree", "-r", "-z", commit).split(b"\0")
    wanted = []
    for entry in listed:
        if not entry:
            continue
        meta, _, path = entry.partition(b"\t")
        mode, kind, blob = meta.split()
        path = path.decode("utf-8", "replace")
        if kind == b"blob" and path.endswith(".py") and not skip(path):
            wanted.append((path, blob))
    if not wanted:
        return
    with subprocess.Popen(["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        for path, blob in wanted:
            proc.stdin.write(blob + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) < 3 or header[1] == b"missing":
                continue
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)      # the newline after each object
            yield path, data.decode("utf-8", "replace")
        proc.stdin.close()


def dotted(node) -> str | None:
    """``"a.b.c"`` of a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None
