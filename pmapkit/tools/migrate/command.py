"""``pmapkit migrate``: the command line (``pmapkit migrate --help``)."""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile

import libcst as cst

from pmapkit.tools.migrate import check
from pmapkit.tools.migrate.transformer import migrate_module

USAGE = "%(prog)s PATH... [-o OUT | --in-place] [--diff] [--strict] [--check [-- ARGS...]]"
DESCRIPTION = """\
Rewrites classic JAX code (pmap, pjit/maps, host_callback, jax_export, tree_map,
jax.ops.index_*, ...) to plain jax 0.10 public API: the output never imports
pmapkit. What cannot be translated safely stays as written with a
'# pmapkit migrate:' comment and a line in the report. PATH is a .py file or a
folder (its .py files, recursively)."""


def _parser(prog="pmapkit migrate"):
    parser = argparse.ArgumentParser(prog=prog, usage=USAGE,
                                     description=DESCRIPTION)
    parser.add_argument("paths", nargs="+", metavar="PATH")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-o", "--output", metavar="OUT",
                       help="write here: a file (one input file) or a folder")
    where.add_argument("--in-place", action="store_true", help="overwrite the inputs")
    parser.add_argument("--diff", action="store_true",
                        help="print a unified diff instead of writing")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when anything is left untranslated")
    parser.add_argument("--check", action="store_true",
                        help="run the original (pmapkit run --route-pmap) and the migrated "
                        "file (plain Python, no pmapkit, DeprecationWarnings as errors) "
                        "and compare exit status and stdout; ARGS after -- go to both")
    return parser


class BadInput(Exception):
    pass


def _inputs(paths):
    """[(file, path relative to its PATH's folder)] or BadInput."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(".py"):
                        full = os.path.join(root, name)
                        found.append((full, os.path.relpath(full, path)))
        elif os.path.isfile(path):
            found.append((path, os.path.basename(path)))
        else:
            raise BadInput(f"no such file or folder: {path!r}")
    if not found:
        raise BadInput(f"no .py files in {', '.join(map(repr, paths))}")
    return found


def _migrate(files):
    """[(file, relative, old source, new source, report)] or BadInput."""
    done = []
    for path, relative in files:
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"cannot read {path!r}: {exc}") from None
        try:
            compile(source, path, "exec", dont_inherit=True)
        except SyntaxError as exc:   # Python's own message says where, precisely
            raise BadInput(f"{path} does not parse (line {exc.lineno}): {exc.msg}") from None
        except ValueError as exc:    # e.g. null bytes
            raise BadInput(f"{path} does not parse: {exc}") from None
        try:
            new, report = migrate_module(source, path)
        except cst.ParserSyntaxError as exc:
            raise BadInput(f"{path} does not parse (line {exc.raw_line}, column "
                           f"{exc.raw_column}): {exc.message}") from None
        done.append((path, relative, source, new, report))
    return done


def _destinations(done, args):
    if args.in_place:
        return [path for path, *_ in done]
    out = args.output
    if len(done) == 1 and out.endswith(".py") and not os.path.isdir(out):
        return [out]
    return [os.path.join(out, relative) for _, relative, *_ in done]


def main(argv, prog="pmapkit migrate"):
    """``pmapkit migrate``; ``prog``: the command as typed, for messages."""
    argv = list(argv)
    script_args = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    args = _parser(prog).parse_args(argv)
    if script_args and not args.check:
        return _error("arguments after -- are for --check", prog)
    if not (args.output or args.in_place or args.diff or args.check):
        return _error("say where the result goes: -o OUT, --in-place, or --diff "
                      "(or --check alone, which migrates into a scratch folder)", prog)
    try:
        done = _migrate(_inputs(args.paths))
    except BadInput as exc:
        return _error(f"{exc}; nothing written", prog)
    with tempfile.TemporaryDirectory(prefix="pmapkit-migrate-") as scratch:
        return _write_and_check(done, args, script_args, scratch)


def _write(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _write_and_check(done, args, script_args, scratch):
    report_stream = sys.stderr if args.diff else sys.stdout
    writing = not args.diff and bool(args.output or args.in_place)
    targets = _destinations(done, args) if writing else None
    # --check runs the original as it is: a result going over it (--in-place)
    # or nowhere (--diff, --check alone) is checked from a scratch copy.
    checked = targets
    if args.check and (not writing or args.in_place):
        checked = [os.path.join(scratch, relative) for _, relative, *_ in done]
    for k, (path, _relative, source, new, report) in enumerate(done):
        if args.diff:
            sys.stdout.writelines(difflib.unified_diff(
                source.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=path, tofile=f"{path} (migrated)"))
        if args.check:
            _write(checked[k], new)
        print(report.format(), file=report_stream)
    status = 0
    if args.check:     # before writing: --in-place must not replace the original first
        verdicts = check.check_all([(path, checked[k]) for k, (path, *_) in enumerate(done)],
                                   script_args)
        for verdict in verdicts:
            print(verdict.format(), file=report_stream)
        if not all(v.same for v in verdicts):
            status = 1
    if writing and args.in_place and status:
        print("pmapkit migrate: --check found a difference: nothing written in place",
              file=sys.stderr)
    elif writing:
        for k, (path, _relative, source, new, _report) in enumerate(done):
            if new != source or targets[k] != path:
                _write(targets[k], new)
    left = sum(len(r.left) for *_, r in done)
    print(f"{len(done)} file(s): {sum(len(r.rewrites) for *_, r in done)} rewritten, "
          f"{left} left, {sum(len(r.kept) for *_, r in done)} pmap kept", file=report_stream)
    if args.strict and left:
        print(f"pmapkit migrate: --strict: {left} place(s) left untranslated", file=sys.stderr)
        status = 1
    return status


def _error(message, prog="pmapkit migrate"):
    print(f"usage: {USAGE % {'prog': prog}}\n{prog}: error: {message}", file=sys.stderr)
    return 2
