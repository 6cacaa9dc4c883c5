"""Every ```python block of README.md and docs/ runs, against the installed build.

Each page runs in a fresh process (8 CPU devices, set before jax starts), its
blocks in order in one namespace, from an empty working directory; a failure
shows the page's own line numbers. ```python notest marks a block that cannot
run here (a multi-host launch, say).
"""
import glob
import os
import subprocess
import sys

import pytest

import _doc_blocks
import _install

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(_install.REPO, "README.md")
DOCS = os.path.join(_install.REPO, "docs")


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


def _environment():
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + ["--xla_force_host_platform_device_count=8"])
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_NUM_CPU_DEVICES", None)
    return env


@pytest.mark.parametrize("page", [p for p in PAGES if _doc_blocks.runnable(_read(p))],
                         ids=_page_id)
def test_page_examples_run(page, tmp_path):
    out = subprocess.run(
        [sys.executable, "-P", os.path.join(HERE, "_doc_blocks.py"), page],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=_environment())
    assert out.returncode == 0, (
        f"{_page_id(page)}: an example failed\n{out.stderr[-4000:]}")


def test_the_pages_are_found():
    if not os.path.isdir(DOCS):
        pytest.skip("no docs/ beside the tests; set PMAPKIT_CHECKOUT")
    names = {_page_id(p) for p in PAGES}
    for expected in ("README.md", "docs/index.md", "docs/pmap.md", "docs/host_callback.md"):
        assert expected in names, sorted(names)
    # The front door shows code that runs.
    assert len(_doc_blocks.runnable(_read(README))) >= 3


def test_notest_blocks_are_rare():
    # A block marked notest is shown unchecked: keep them few, and in docs/.
    marked = {_page_id(p): sum(b.language == "python" and not b.runs
                               for b in _doc_blocks.blocks(_read(p))) for p in PAGES}
    assert marked.get("README.md", 0) == 0, marked
    assert sum(marked.values()) <= 6, marked


def test_the_block_reader():
    text = ("intro\n"
            "```python\nx = 1\n```\n"
            "```bash\nls\n```\n"
            "  ```python notest\n  launch()\n  ```\n"
            "````python\n```\ny = x + 1\n````\n")
    found = _doc_blocks.blocks(text)
    assert [(b.language, b.words, b.line) for b in found] == [
        ("python", [], 3), ("bash", [], 6), ("python", ["notest"], 9), ("python", [], 12)]
    assert [b.source for b in _doc_blocks.runnable(text)] == ["x = 1\n", "```\ny = x + 1\n"]
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
