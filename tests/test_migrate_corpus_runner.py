"""The corpus runner's notebook rebuild (tests/migrate_corpus/run.py): a cell's
last bare expression is shown as IPython shows it."""
import contextlib
import importlib.util
import io
import os

_RUN = os.path.join(os.path.dirname(__file__), "migrate_corpus", "run.py")


def _runner():
    spec = importlib.util.spec_from_file_location("migrate_corpus_run", _RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shown(cell):
    run = _runner()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(run._DISPLAY + run._displayed(cell), {})
    return out.getvalue()


def test_a_bare_tuple_is_shown_as_one_value():
    # IPython shows `a.shape, b.shape` as one tuple; the display call must get one argument
    assert _shown("a = (8, 3)\nb = (3, 8)\na, b") == "((8, 3), (3, 8))\n"


def test_the_last_expression_alone_is_shown():
    assert _shown("x = 2\nx * 21") == "42\n"
    assert _shown("x = 2\nx * 21;") == ""
