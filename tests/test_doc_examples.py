"""Every ```python and ```bash block of README.md and docs/ runs, against the
installed build, on one device and on eight.

Each page runs twice, in a fresh process each: once as on a laptop (one CPU
device) and once with 8 CPU devices set before jax starts. Each example is
a test item of its own (``README.md:70-8dev``), run in its page's process
after the page's earlier ones: its blocks run in order, Python pasted line by line into one interactive interpreter
(``code.InteractiveConsole``: a reader's paste, stricter than a file, where
a ``with`` block followed at once by an unindented line is a SyntaxError),
bash in a shell each (the ``pmapkit`` command
of this install first on PATH), from an empty working directory in which
``tests`` is the checkout's (so ``pmapkit run tests/legacy_scripts/...`` runs
as from a checkout, and files a command writes stay out of it). A shell
command is typed into a fresh shell whose devices are what the command
itself sets, so the bash blocks run once, in the one-device run, where a
command that needs 8 devices and does not ask for them fails; the 8-device
run is the Python blocks'. A failure shows the page's own line numbers. ```python notest / ```bash notest marks a
block that cannot run here (an install, a multi-host launch, say).
"""
import glob
import os
import select
import subprocess
import sys

import pytest

import _doc_blocks
import _install

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(_install.REPO, "README.md")
DOCS = os.path.join(_install.REPO, "docs")
DEVICE_COUNTS = (1, 8)


def _pages():
    pages = [README] if os.path.isfile(README) else []
    pages += sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
    return pages


def _page_id(path):
    return os.path.relpath(path, _install.REPO)


PAGES = _pages()


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _environment(devices):
    """A reader's environment: ``devices`` CPU devices, nothing else set."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_NUM_CPU_DEVICES", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"   # `pmapkit run -m` in tests/ leaves no cache there
    return env


def _runs(page, devices):
    """(page, devices) pairs with something to run: every block on one
    device, the Python blocks on eight."""
    return [b for b in _doc_blocks.runnable(_read(page))
            if devices == 1 or b.language == "python"]


RUNS = [(page, devices) for page in PAGES for devices in DEVICE_COUNTS if _runs(page, devices)]
#: One test item per example: (page, devices, index among the run's blocks, block).
EXAMPLES = [(page, devices, k, block) for page, devices in RUNS
            for k, block in enumerate(_runs(page, devices))]
EXAMPLE_TIMEOUT_S = 900


class _PageSession:
    """One fresh process running a page's examples (``_doc_blocks.py
    --serve``), one at a time as asked: a later example runs in the session
    its page's earlier ones made, as a reader's paste does."""

    def __init__(self, page, devices, cwd):
        self.page, self.devices, self.failed = page, devices, None
        tests = os.path.join(_install.REPO, "tests")
        if os.path.isdir(tests):
            os.symlink(tests, cwd / "tests")
        self.log = open(cwd.parent / f"{cwd.name}.log", "w+", encoding="utf-8")
        read, write = os.pipe()
        only_python = [] if devices == 1 else ["--no-bash"]
        self.proc = subprocess.Popen(
            [sys.executable, "-P", os.path.join(HERE, "_doc_blocks.py"), page, *only_python,
             "--serve", str(write)],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, text=True,
            pass_fds=(write,), cwd=cwd, env=_environment(devices))
        os.close(write)
        self.replies = os.fdopen(read, encoding="utf-8")

    def _output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def run(self, index, line):
        where = f"{_page_id(self.page)}:{line} on {self.devices} device(s)"
        if self.failed is not None:
            pytest.skip(f"an earlier example of the page failed (line {self.failed})")
        self.proc.stdin.write(f"{index}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], EXAMPLE_TIMEOUT_S)
        if not ready:
            self.failed, output = line, self._output()
            self.close()
            pytest.fail(f"{where}: no answer in {EXAMPLE_TIMEOUT_S} s\n{output}")
        answer = self.replies.readline().split()
        if answer != ["ok"]:
            self.failed = answer[1] if len(answer) == 2 else line
            self.proc.wait(timeout=60)   # it ends at its first failure
            output = self._output()
            self.close()
            pytest.fail(f"{where}: an example failed\n{output}")

    def close(self):
        if self.log.closed:
            return
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.replies.close()
        self.log.close()


@pytest.fixture(scope="module")
def page_sessions(tmp_path_factory):
    """The session of the page being run: one at a time (each is a JAX
    process), started at a page's first example, closed at the next page's."""
    current = {}

    def session(page, devices):
        if (page, devices) not in current:
            for old in current.values():
                old.close()
            current.clear()
            current[page, devices] = _PageSession(
                page, devices, tmp_path_factory.mktemp("page"))
        return current[page, devices]

    yield session
    for old in current.values():
        old.close()


@pytest.mark.parametrize("page, devices, index, block", EXAMPLES,
                         ids=[f"{_page_id(p)}:{b.line}-{n}dev" for p, n, _, b in EXAMPLES])
def test_example_runs(page, devices, index, block, page_sessions):
    page_sessions(page, devices).run(index, block.line)


def test_the_pages_are_found():
    if not os.path.isdir(DOCS):
        pytest.skip("no docs/ beside the tests; set PMAPKIT_CHECKOUT")
    names = {_page_id(p) for p in PAGES}
    for expected in ("README.md", "docs/index.md", "docs/pmap.md", "docs/host_callback.md"):
        assert expected in names, sorted(names)
    # The front door shows code that runs.
    assert len(_doc_blocks.runnable(_read(README))) >= 3


def test_the_readme_is_a_front_door():
    # At most 200 lines: the detail lives in docs/, one link away.
    if not os.path.isfile(README):
        pytest.skip("no README.md beside the tests; set PMAPKIT_CHECKOUT")
    lines = _read(README).splitlines()
    assert len(lines) <= 200, len(lines)


def test_notest_blocks_are_rare():
    # A block marked notest is shown unchecked: keep them few, and in docs/.
    marked = {_page_id(p): sum(b.language == "python" and not b.runs
                               for b in _doc_blocks.blocks(_read(p))) for p in PAGES}
    assert marked.get("README.md", 0) == 0, marked
    assert sum(marked.values()) <= 6, marked


def test_the_commands_shown_run():
    # Every `pmapkit run` / `pmapkit migrate` shown in a bash block runs (on
    # files of the repository); notest is for installs, the suite, clusters.
    skipped = [f"{_page_id(p)}:{b.line}" for p in PAGES for b in _doc_blocks.blocks(_read(p))
               if b.language == "bash" and not b.runs
               and any(line.lstrip().startswith(("pmapkit run", "pmapkit migrate"))
                       for line in b.source.splitlines())]
    assert not skipped, f"pmapkit run/migrate examples marked notest: {skipped}"
    shown = sum(b.runs and b.language == "bash" for p in PAGES
                for b in _doc_blocks.blocks(_read(p)))
    assert shown >= 4, shown


def test_every_python_block_compiles_as_pasted():
    # The quick half of the page runs: every statement as the interpreter
    # reads it pasted, every failing line of every page at once.
    refused = []
    for page in PAGES:
        try:
            _doc_blocks.check_pasted_syntax(page, _read(page))
        except _doc_blocks.PastedBlockFailed as failed:
            refused.append(str(failed))
    assert not refused, "\n".join(refused)


def _paste(tmp_path, body):
    page = tmp_path / "page.md"
    page.write_text(body)
    return page, subprocess.run(
        [sys.executable, "-P", os.path.join(HERE, "_doc_blocks.py"), str(page)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.mark.parametrize("body, line", [
    # a compound statement ends only at an empty line
    ("# t\n\n```python\nwith open('page.md') as f:\n    text = f.read()\nprint(text)\n```\n", 6),
    ("```python\nfor i in range(2):\n    pass\nprint(i)\n```\n", 4),
    # ... and an empty line ends it
    ("```python\ndef f():\n    x = 1\n\n    return x\n```\n", 5),
])
def test_a_block_that_fails_pasted_names_its_page_line(tmp_path, body, line):
    page, out = _paste(tmp_path, body)
    assert out.returncode != 0
    assert f'File "{page}", line {line}' in out.stderr, out.stderr
    assert "Error" in out.stderr, out.stderr


def test_blocks_paste_into_one_session(tmp_path):
    # A block may end inside a compound statement (the reader's Enter ends
    # it); a value typed alone is shown, as the interpreter shows it.
    _, out = _paste(tmp_path, "```python\nfor i in range(2):\n    total = i * 10\n```\n\n"
                              "text\n\n```python\ntotal + 1\n```\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "11\n"


def test_the_block_reader():
    text = ("intro\n"
            "```python\nx = 1\n```\n"
            "```bash\nls\n```\n"
            "  ```python notest\n  launch()\n  ```\n"
            "````python\n```\ny = x + 1\n````\n")
    found = _doc_blocks.blocks(text)
    assert [(b.language, b.words, b.line) for b in found] == [
        ("python", [], 3), ("bash", [], 6), ("python", ["notest"], 9), ("python", [], 12)]
    assert [b.source for b in _doc_blocks.runnable(text)] == ["x = 1\n", "ls\n",
                                                              "```\ny = x + 1\n"]
    assert found[2].source == "launch()\n"
    with pytest.raises(ValueError, match="line 1"):
        _doc_blocks.blocks("```python\nnever closed\n")


def test_a_failing_block_names_its_page_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nvalue = 1\n```\n\ntext\n\n```python\nvalue / 0\n```\n")
    out = subprocess.run([sys.executable, "-P", os.path.join(HERE, "_doc_blocks.py"), str(page)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode != 0
    assert f'File "{page}", line 10' in out.stderr, out.stderr
    assert "ZeroDivisionError" in out.stderr


def test_a_failing_bash_block_names_its_page_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```bash\ntrue\n```\n\n```bash\necho said; false\n```\n")
    out = subprocess.run([sys.executable, "-P", os.path.join(HERE, "_doc_blocks.py"), str(page)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode != 0
    assert f'File "{page}", line 8: bash block exited 1' in out.stderr, out.stderr
    assert "said" in out.stderr


def test_each_example_is_an_item_and_a_failure_names_its_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nvalue = 1\n```\n\n```python\nvalue / 0\n```\n\n"
                    "```python\nprint(value)\n```\n")
    cwd = tmp_path / "run"
    cwd.mkdir()
    session = _PageSession(str(page), 8, cwd)
    try:
        session.run(0, 2)
        with pytest.raises(pytest.fail.Exception, match=r"(?s)page.md:6 .*ZeroDivisionError"):
            session.run(1, 6)
        with pytest.raises(pytest.skip.Exception, match="line 6"):
            session.run(2, 10)
    finally:
        session.close()
