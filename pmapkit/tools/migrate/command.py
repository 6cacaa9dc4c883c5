"""``pmapkit migrate``: the command line (``pmapkit migrate --help``)."""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile

import libcst as cst

from pmapkit.tools.migrate import check, files

USAGE = "%(prog)s PATH... [-o OUT | --in-place] [--diff] [--strict] [--check [-- ARGS...]]"
DESCRIPTION = """\
Rewrites classic JAX code (pmap, pjit/maps, host_callback, jax_export, tree_map,
jax.ops.index_*, ...) to plain jax 0.10 public API: the output never imports
pmapkit. What cannot be translated safely stays as written with a
'# pmapkit migrate:' comment and a line in the report (the output is scanned:
anything classic left is reported). PATH is a .py file or a folder (its .py
files, recursively, less output folders of earlier runs). Files are written
atomically in their own encoding and line endings; -o never writes over an
input (use --in-place)."""


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
                        "and compare exit status and stdout: exit 0 only when both "
                        "succeed and agree (UNPROVEN when the original fails); ARGS "
                        "after -- go to both")
    return parser


class BadInput(Exception):
    pass


def _inputs(paths, output=None):
    """([(file, path relative to its PATH's folder)], [skipped folders]) or
    BadInput. A folder's walk skips the output folder and any earlier output
    folder (one holding ``files.MARKER``): migrated code is never migrated again."""
    found, skipped = [], []
    out_folder = output if output and not _names_a_file(output) else None
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                keep = []
                for d in dirs:
                    full = os.path.join(root, d)
                    if ((out_folder and files.inside(full, out_folder))
                            or files.is_output_folder(full)):
                        skipped.append(full)
                    else:
                        keep.append(d)
                dirs[:] = keep
                for name in sorted(names):
                    if name.endswith(".py"):
                        full = os.path.join(root, name)
                        found.append((full, os.path.relpath(full, path)))
        elif os.path.isfile(path):
            found.append((path, os.path.basename(path)))
        else:
            raise BadInput(f"no such file or folder: {path!r}")
    if not found:
        raise BadInput(f"no .py files in {', '.join(map(repr, paths))}")
    return found, skipped


def _names_a_file(output):
    return output.endswith(".py") and not os.path.isdir(output)


def _refuse_overwrites(paths, found, args):
    """BadInput unless ``-o`` leaves every input as it is."""
    out = args.output
    if not out:
        return
    if _names_a_file(out) and len(found) > 1:
        raise BadInput(f"-o {out} names one file, but {len(found)} input files were "
                       "found: give a folder")
    advice = "use --in-place to overwrite the inputs"
    for path in paths:
        if files.same_path(out, path):
            raise BadInput(f"-o {out} is the input {path}: {advice}")
    for path, _relative in found:
        if files.same_path(out, os.path.dirname(os.path.abspath(path))):
            raise BadInput(f"-o {out} is the folder holding the input {path}: {advice}")
    inputs = {os.path.realpath(path): path for path, _relative in found}
    for target in _destinations(found, args):   # e.g. through a symbolic link
        if os.path.realpath(target) in inputs:
            raise BadInput(f"-o {out} would write {target} over the input "
                           f"{inputs[os.path.realpath(target)]}: {advice}")


def _migrate(found):
    """[(file, relative, Source, new text, report)] or BadInput."""
    # The rules read this JAX: loaded here, after the command line is parsed.
    from pmapkit.tools.migrate.transformer import migrate_module
    done = []
    for path, relative in found:
        try:
            source = files.read_source(path)
        except files.Unreadable as exc:
            raise BadInput(str(exc)) from None
        try:
            compile(source.text, path, "exec", dont_inherit=True)
        except SyntaxError as exc:   # Python's own message says where, precisely
            raise BadInput(f"{path} does not parse (line {exc.lineno}): {exc.msg}") from None
        except ValueError as exc:    # e.g. null bytes
            raise BadInput(f"{path} does not parse: {exc}") from None
        try:
            new, report = migrate_module(source.text, path)
        except cst.ParserSyntaxError as exc:
            raise BadInput(f"{path} does not parse (line {exc.raw_line}, column "
                           f"{exc.raw_column}): {exc.message}") from None
        try:
            files.encode(new, source.encoding, path)
        except files.Unreadable as exc:
            raise BadInput(str(exc)) from None
        done.append((path, relative, source, new, report))
    return done


def _destinations(done, args):
    if args.in_place:
        return [path for path, *_ in done]
    out = args.output
    if len(done) == 1 and _names_a_file(out):
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
        found, skipped = _inputs(args.paths, args.output)
        _refuse_overwrites(args.paths, found, args)
        done = _migrate(found)
    except BadInput as exc:
        return _error(f"{exc}; nothing written", prog)
    report_stream = sys.stderr if args.diff else sys.stdout
    for folder in skipped:
        print(f"skipped {folder}: an output folder of pmapkit migrate", file=report_stream)
    with tempfile.TemporaryDirectory(prefix="pmapkit-migrate-") as scratch:
        return _write_and_check(done, args, script_args, scratch)


def _write(path, source, text):
    """``text`` to ``path`` atomically, in ``source``'s encoding and permission bits."""
    files.write_atomic(path, files.encode(text, source.encoding, path), source.mode)


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
                source.text.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=path, tofile=f"{path} (migrated)"))
        if args.check:
            _write(checked[k], source, new)
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
        print("pmapkit migrate: --check did not prove every file: nothing written in place",
              file=sys.stderr)
    elif writing:
        for k, (path, _relative, source, new, _report) in enumerate(done):
            if new != source.text or targets[k] != path:
                _write(targets[k], source, new)
        if not args.in_place and not _names_a_file(args.output):
            files.mark_output_folder(args.output)
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
