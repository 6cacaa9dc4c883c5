"""``pmapkit migrate``: the command line (``pmapkit migrate --help``)."""
from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import stat
import sys

import libcst as cst

from pmapkit.tools.migrate import check, check_runs, files, notebooks

USAGE = "%(prog)s PATH... [-o OUT | --in-place] [--diff] [--strict] [--check [-- ARGS...]]"
DESCRIPTION = """\
Rewrites classic JAX code (pmap, pjit/maps, host_callback, jax_export, tree_map,
jax.ops.index_*, ...) to plain jax 0.10 public API: the output never imports
pmapkit. What cannot be translated safely stays as written with a
'# pmapkit migrate:' comment and a line in the report (the output is scanned:
anything classic left is reported). PATH is a .py file, a Jupyter notebook
(.ipynb: its code cells rewritten, the rest kept) or a folder (its .py and
.ipynb files, recursively, less output folders of earlier runs). Files are written
atomically in their own encoding and line endings, keeping their owner (a
link: its target is written; a file with other hard links is refused); -o
never writes over an input (use --in-place)."""


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
                        "file (plain Python, no pmapkit, DeprecationWarnings as errors), "
                        "one after the other, each in its own temporary copy of the "
                        "program's folder, and compare exit status and stdout as bytes: "
                        "exit 0 only when both succeed and agree (UNPROVEN when the "
                        "original fails); ARGS after -- go to both")
    proof = parser.add_argument_group("--check options")
    proof.add_argument("--rtol", type=_tolerance, default=0.0, metavar="R",
                       help="floats printed may differ by R times the original's (default "
                       "0: equal bytes); integers, inf and nan never")
    proof.add_argument("--atol", type=_tolerance, default=0.0, metavar="A",
                       help="floats printed may differ by A more (default 0)")
    proof.add_argument("--ignore", type=_pattern, action="append", default=[],
                       metavar="REGEX", help="skip the stdout lines REGEX matches (Python "
                       "re.search; timings), in both runs; may be repeated")
    proof.add_argument("--timeout", type=_positive, default=check.TIMEOUT_S,
                       metavar="SECONDS", help="stop a run after SECONDS (default "
                       f"{check.TIMEOUT_S})")
    proof.add_argument("--stdin", metavar="FILE",
                       help="both runs read FILE as stdin (default /dev/null)")
    proof.add_argument("--copy-limit", type=_positive, default=check.COPY_LIMIT_MIB,
                       metavar="MIB", help="refuse a program folder holding more than MIB "
                       f"MiB of files (default {check.COPY_LIMIT_MIB})")
    return parser


#: The flags that only --check reads, as typed, and their defaults.
CHECK_FLAGS = {"rtol": ("--rtol", 0.0), "atol": ("--atol", 0.0), "ignore": ("--ignore", []),
               "timeout": ("--timeout", check.TIMEOUT_S), "stdin": ("--stdin", None),
               "copy_limit": ("--copy-limit", check.COPY_LIMIT_MIB)}


def _number(text, what):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}, not {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{what}, not {text!r}")
    return value


def _tolerance(text):
    value = _number(text, "a number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"a number >= 0, not {text!r}")
    return value


def _positive(text):
    value = _number(text, "a number > 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a number > 0, not {text!r}")
    return value


def _pattern(text):
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r}: {exc}") \
            from None


class BadInput(Exception):
    pass


def _inputs(paths, output=None):
    """([(file, path relative to its PATH's folder)], [skipped folders]) or
    BadInput. A folder's walk skips the output folder and any earlier output
    folder (one holding ``files.MARKER``): migrated code is never migrated again."""
    found, skipped = [], []
    out_folder = output if output and not _names_a_file(output) else None
    def unreadable(exc):
        raise BadInput(f"cannot read the folder {exc.filename!r}: {exc.strerror}")
    for path in paths:
        try:
            kind = os.stat(path).st_mode
        except FileNotFoundError:
            raise BadInput(f"no such file or folder: {path!r}") from None
        except OSError as exc:
            raise BadInput(f"cannot read {path!r}: {exc.strerror}") from None
        if stat.S_ISDIR(kind):
            for root, dirs, names in os.walk(path, onerror=unreadable):
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
                dirs[:] = [d for d in dirs if d != ".ipynb_checkpoints"]
                for name in sorted(names):
                    if name.endswith(".py") or notebooks.is_notebook(name):
                        full = os.path.join(root, name)
                        found.append((full, os.path.relpath(full, path)))
        elif stat.S_ISREG(kind):
            found.append((path, os.path.basename(path)))
        else:
            raise BadInput(f"not a file or folder: {path!r}")
    if not found:
        raise BadInput(f"no .py or .ipynb files in {', '.join(map(repr, paths))}")
    return found, skipped


def _names_a_file(output):
    return output.endswith((".py", notebooks.SUFFIX)) and not os.path.isdir(output)


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
        if notebooks.is_notebook(path):
            try:
                new, report = notebooks.migrate_notebook(source.text, path, migrate_module)
            except notebooks.NotANotebook as exc:
                raise BadInput(str(exc)) from None
            except (SyntaxError, cst.ParserSyntaxError) as exc:
                raise BadInput(f"{path}: a code cell does not parse: {exc}") from None
            done.append((path, relative, source, new, report))
            continue
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
    if not args.check:
        for name, (flag, default) in CHECK_FLAGS.items():
            if getattr(args, name) != default:
                return _error(f"{flag} is for --check", prog)
    if not (args.output or args.in_place or args.diff or args.check):
        return _error("say where the result goes: -o OUT, --in-place, or --diff "
                      "(or --check alone, which writes nothing)", prog)
    options = check.Options(rtol=args.rtol, atol=args.atol, ignore=tuple(args.ignore),
                            timeout=args.timeout, stdin=args.stdin,
                            copy_limit_mib=args.copy_limit)
    try:
        found, skipped = _inputs(args.paths, args.output)
        _refuse_overwrites(args.paths, found, args)
        done = _migrate(found)
        writing = not args.diff and bool(args.output or args.in_place)
        targets = _destinations(done, args) if writing else None
        if writing:
            _refuse_unwritable(targets)
        programs = _programs(done, targets) if args.check else None
        plans = _prepare_check(programs, options) if args.check else None
    except BadInput as exc:
        return _error(f"{exc}; nothing written", prog)
    report_stream = sys.stderr if args.diff else sys.stdout
    for folder in skipped:
        print(f"skipped {folder}: an output folder of pmapkit migrate", file=report_stream)
    return _write_and_check(done, args, script_args, targets, programs, plans, options, prog)


def _refuse_unwritable(targets):
    """BadInput unless every target can be written as ``files.write_atomic`` promises."""
    for target in targets:
        problem = files.write_problem(target)
        if problem:
            raise BadInput(problem)


def _programs(done, targets):
    """The ``check_runs.Program`` of each file; a notebook's with the scripts of its
    code cells (or BadInput where a cell holds an IPython line)."""
    out = []
    for k, (path, _relative, source, new, _report) in enumerate(done):
        scripts = None
        if notebooks.is_notebook(path):
            try:
                scripts = (notebooks.script(source.text, path).encode(),
                           notebooks.script(new, path).encode())
            except notebooks.NotANotebook as exc:
                raise BadInput(str(exc)) from None
        out.append(check_runs.Program(path, targets[k] if targets else f"{path} (migrated)",
                                      files.encode(new, source.encoding, path), source.mode,
                                      scripts))
    return out


def _prepare_check(programs, options):
    if options.stdin is not None:
        try:
            with open(options.stdin, "rb"):
                pass
        except OSError as exc:
            raise BadInput(f"--stdin {options.stdin}: {exc.strerror}") from None
    try:
        return check_runs.plans(programs, options)
    except check_runs.CannotCopy as exc:
        raise BadInput(str(exc)) from None


def _write(path, source, text):
    """``text`` to ``path`` atomically, in ``source``'s encoding and permission bits."""
    files.write_atomic(path, files.encode(text, source.encoding, path), source.mode)


def _write_and_check(done, args, script_args, targets, programs, plans, options, prog):
    report_stream = sys.stderr if args.diff else sys.stdout
    for path, _relative, source, new, report in done:
        if args.diff:
            sys.stdout.writelines(difflib.unified_diff(
                source.text.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=path, tofile=f"{path} (migrated)"))
        print(report.format(), file=report_stream)
    status = 0
    if args.check:     # before writing: --in-place must not replace the original first
        report_stream.flush()
        same = True
        try:
            for verdict in check_runs.check_each(programs, script_args, options, plans):
                print(verdict.format(), file=report_stream, flush=True)
                same = same and verdict.same
        except check_runs.CannotCopy as exc:
            return _error(f"{exc}; nothing written", prog)
        if not same:
            status = 1
    if targets and args.in_place and status:
        print("pmapkit migrate: --check did not prove every file: nothing written in place",
              file=sys.stderr)
    elif targets:
        # A folder migrate makes is marked; a folder of the user's never is.
        marked = not args.in_place and not _names_a_file(args.output) \
            and not os.path.isdir(args.output)
        written = 0
        for k, (path, _relative, source, new, _report) in enumerate(done):
            if new != source.text or targets[k] != path:
                try:
                    _write(targets[k], source, new)
                except files.Unwritable as exc:
                    return _error(f"{exc}; {written} file(s) written before it", prog)
                except OSError as exc:
                    return _error(f"cannot write {targets[k]}: {exc.strerror or exc}; "
                                  f"{written} file(s) written before it", prog)
                written += 1
        if marked:
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
