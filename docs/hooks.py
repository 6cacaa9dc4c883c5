"""mkdocs hook: a ```python notest fence renders as a Python block.

``notest`` in a fence's info string tells tests/_doc_blocks.py not to run the
block; to pymdownx.superfences it is an unknown option, which would make it
drop the fence. Before the page is parsed the word becomes a title that says
so to the reader.
"""
import re

_NOTEST = re.compile(r"^(?P<open>[ \t]*(?:`{3,}|~{3,})[ \t]*python)[ \t]+notest[ \t]*$",
                     re.MULTILINE)


def on_page_markdown(markdown, **_):
    return _NOTEST.sub(r'\g<open> title="not run by the doc tests"', markdown)
