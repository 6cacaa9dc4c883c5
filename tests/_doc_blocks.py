"""The runnable examples of README.md and docs/*.md.

A page's ```python and ```bash blocks are its examples: they run in order,
in one fresh process, as a reader pasting them into one session and one
shell would: the Python blocks into one interactive interpreter
(``code.InteractiveConsole``, line by line, an empty line after each block),
each bash block with ``bash -e`` in the current directory. Pasted is
stricter than run as a file (a compound statement ends only at an empty
line, and an empty line ends it), so a block that runs pasted runs as a
file too. A block whose fence info string says
``notest`` (```python notest, ```bash notest) is shown, not run: installs,
the whole suite, the site's build, a cluster launch.

Run as a script (``python _doc_blocks.py PAGE [--no-bash]``) it executes
PAGE's blocks (``--no-bash``: its Python blocks only) and stops at the first
failure (``--serve FD``: one block at a time, as asked on stdin, answered on
file descriptor FD: the test runs each example as an item of its own); each statement is compiled under the page's path with its own line
numbers, so a traceback points at the Markdown line that failed; a failing
bash block is reported with its page line and its output.
"""
import code
import re
import subprocess
import sys

#: The languages whose blocks run.
RUN_LANGUAGES = ("python", "bash")

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")


class Block:
    """One fenced code block: its language, info words, first source line."""

    def __init__(self, language, words, line, source):
        self.language = language
        self.words = words
        self.line = line          # 1-based line of the block's first source line
        self.source = source

    @property
    def runs(self):
        return self.language in RUN_LANGUAGES and "notest" not in self.words


def blocks(text):
    """Every fenced block of a Markdown text, in order."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        words = opening["info"].split()
        body, j = [], i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if (closing and closing["fence"][0] == fence[0]
                    and len(closing["fence"]) >= len(fence) and not closing["info"].strip()):
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"a code block opened at line {i + 1} is never closed")
        found.append(Block(words[0].lower() if words else "", words[1:], i + 2,
                           "\n".join(body) + "\n"))
        i = j + 1
    return found


def runnable(text):
    return [b for b in blocks(text) if b.runs]


class BashBlockFailed(Exception):
    """A bash block of a page exited non-zero."""


def _run_bash(path, block):
    out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.source],
                         capture_output=True, text=True, timeout=600)
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        raise BashBlockFailed(
            f'File "{path}", line {block.line}: bash block exited {out.returncode}\n'
            f"{block.source}--- stdout:\n{out.stdout[-3000:]}--- stderr:\n{out.stderr[-3000:]}")


class PastedBlockFailed(Exception):
    """A Python block of a page failed as pasted into the interpreter."""


class Paste(code.InteractiveConsole):
    """One interactive session into which a page's blocks are pasted, line
    by line. A statement compiles under the page's path at its own line;
    the first error (printed as the interpreter prints it) ends the run."""

    def __init__(self, path, execute=True):
        super().__init__({"__name__": "__main__"}, filename=path)
        self.path = path
        self.execute = execute   # False: compile each statement, run nothing
        self._start = 1          # page line of the statement being typed

    def paste(self, block):
        lines = block.source.splitlines()
        for number, line in enumerate(lines, start=block.line):
            if not self.buffer:
                self._start = number
            self.push(line)
        if lines and lines[-1].strip():
            self.push("")    # the reader's Enter that ends a last compound statement
        if self.buffer:
            raise PastedBlockFailed(
                f'File "{self.path}", line {self._start}: the block ends inside a '
                "statement: the interpreter is still waiting for its end")

    def runsource(self, source, filename="<input>", symbol="single"):
        return super().runsource("\n" * (self._start - 1) + source, filename, symbol)

    def runcode(self, code):
        if self.execute:
            super().runcode(code)

    def showsyntaxerror(self, filename=None, **kwargs):
        super().showsyntaxerror(filename, **kwargs)
        line = getattr(sys.exc_info()[1], "lineno", "?")
        raise PastedBlockFailed(f'File "{self.path}", line {line}: does not compile as pasted')

    def showtraceback(self):
        super().showtraceback()
        raise PastedBlockFailed(f"{self.path}: a statement raised")


def check_pasted_syntax(path, text):
    """Raise ``PastedBlockFailed`` at the first statement of the page's
    Python blocks that the interpreter would refuse as pasted (runs nothing)."""
    session = Paste(path, execute=False)
    for block in runnable(text):
        if block.language == "python":
            session.paste(block)


def run_page(path, bash=True):
    """Execute the page's runnable blocks in order: Python pasted into one
    interactive session, bash (unless ``bash`` is false) in a shell of its
    own each, in the current directory."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    session = Paste(path)
    for block in runnable(text):
        if block.language == "bash":
            if bash:
                _run_bash(path, block)
            continue
        session.paste(block)


def serve(path, bash, replies):
    """Run the page's blocks as asked, one example at a time: each line read
    from stdin is the index of a runnable block (bash ones left out unless
    ``bash``), run with every block before it not run yet, in one session;
    each request is answered on ``replies`` with one line, ``ok`` or
    ``failed LINE`` (the page line of the block that failed, whose error is
    on stderr). Returns at the end of stdin or at the first failure."""
    with open(path, encoding="utf-8") as f:
        todo = [b for b in runnable(f.read()) if bash or b.language == "python"]
    session, done = Paste(path), 0
    for request in sys.stdin:
        index = int(request)
        try:
            while done <= index:
                block, done = todo[done], done + 1
                if block.language == "bash":
                    _run_bash(path, block)
                else:
                    session.paste(block)
        except (PastedBlockFailed, BashBlockFailed) as failed:
            print(failed, file=sys.stderr, flush=True)
            replies.write(f"failed {block.line}\n")
            replies.flush()
            return 1
        sys.stdout.flush()
        sys.stderr.flush()
        replies.write("ok\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    # python _doc_blocks.py PAGE [--no-bash] [--serve FD]
    args = sys.argv[2:]
    if "--serve" in args:
        fd = int(args[args.index("--serve") + 1])
        with open(fd, "w") as replies:
            sys.exit(serve(sys.argv[1], "--no-bash" not in args, replies))
    try:
        run_page(sys.argv[1], bash="--no-bash" not in args)
    except PastedBlockFailed as failed:   # the interpreter printed the error
        sys.exit(f"{failed}")
