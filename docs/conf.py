"""The documentation site: Sphinx + MyST (the pages stay Markdown) with the
book theme, as JAX's own docs are built.

    pip install ".[docs]"
    sphinx-build -W --keep-going docs site      # warnings are errors

The API reference is read from the installed pmapkit (autodoc imports it);
``jax.jit``-style names link into JAX's reference through a local inventory
(docs/_inventories/jax.inv, made by docs/_tools/jax_inventory.py): the builds
reach no network but the package index.
"""
import os
import sys

import pmapkit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

project = "pmapkit"
author = "the pmapkit authors"
copyright = "the pmapkit authors"
release = version = pmapkit.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "pmapkit_docs",
    "fold_tables",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_tools", "_inventories", "**/.ipynb_checkpoints"]

# Markdown: heading anchors for the pages' #section links; ```{directive}
# fences and {role}`...` as MyST writes them.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

# A fence without a language is program output: shown as it is.
highlight_language = "none"

# Docstrings: ``code`` is reST's; a `name` in single backticks is a reference
# when it names a known object (ours or JAX's), plain code otherwise.
default_role = "py:obj"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_typehints = "none"
# Defaults as written in the source (a sentinel shows as its name, not <object object>).
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
add_module_names = False

intersphinx_mapping = {
    "jax": ("https://docs.jax.dev/en/latest/", os.path.join("_inventories", "jax.inv")),
}

html_theme = "sphinx_book_theme"
html_title = f"pmapkit {release}"
# pmapkit.css: tables fit the page (their inline code wraps).
html_static_path = ["_static"]
# API pages first in the search (the changelog is out of it: nosearch).
html_search_scorer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext", "search_scorer.js")
html_css_files = ["pmapkit.css"]
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "icon_links": [{
        "name": "JAX documentation",
        "url": "https://docs.jax.dev/en/latest/",
        "icon": "fa-solid fa-book",
        "type": "fontawesome",
    }],
    "extra_footer": (f"pmapkit {release} &middot; built on "
                     '<a href="https://docs.jax.dev/en/latest/">JAX</a>'),
}
