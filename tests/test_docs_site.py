"""The built documentation site: its search finds every classic name of
docs/classic-names.md, it says its version, and its API pages show no reST
markup as text.

The site is the one at ``PMAPKIT_SITE`` (``.ci/run`` builds it, then runs
this file on it); otherwise it is built here, strictly, when Sphinx is
installed (``pip install ".[docs]"``), and these tests are skipped when not.
"""
import glob
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

import _install

DOCS = os.path.join(_install.REPO, "docs")
CLASSIC_PAGE = os.path.join(DOCS, "classic-names.md")
# The tables of classic names: the first cell of each row names one.
_NAME_TABLES = ("### Served names", "### With a replacement", "## The census of real use")
_FAMILY_TABLE = "### JAX internals (no public replacement)"
_ALSO_SERVED = "Also served, older than every census release:"
_CODE = re.compile(r"`([^`]+)`")


def _display(code):
    """``{classic}`title <target>``` and ```name``` alike: the text shown."""
    return code.split(" <")[0]


def classic_names(text):
    """Every classic name the page's tables (and its "also served" list)
    show, as a full dotted name: a family row's names under its module."""
    names, section = [], None
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.strip()
        elif line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            first = _CODE.findall(cells[0])
            if section in _NAME_TABLES and first:
                names.append(_display(first[0]))
            elif section == _FAMILY_TABLE and first:
                module = _display(first[0])
                names.append(module)
                names += [f"{module}.{_display(n)}" for n in _CODE.findall(cells[1])]
        elif line.startswith(_ALSO_SERVED):
            names += [_display(n) for n in _CODE.findall(line[len(_ALSO_SERVED):])]
    return names


def _built_site(tmp_path_factory):
    given = os.environ.get("PMAPKIT_SITE")
    if given:
        return given
    if not os.path.isfile(os.path.join(DOCS, "conf.py")):
        pytest.skip("no docs/ beside the tests; set PMAPKIT_CHECKOUT")
    try:
        import sphinx  # noqa: F401
    except ImportError:
        pytest.skip('Sphinx not installed (pip install ".[docs]"), PMAPKIT_SITE unset')
    site = str(tmp_path_factory.mktemp("site"))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-P", "-m", "sphinx", "-W", "--keep-going", "-q",
                          "-b", "html", DOCS, site],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, f"the site does not build strictly:\n{out.stderr[-4000:]}"
    return site


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return _built_site(tmp_path_factory)


def _search_index(site):
    with open(os.path.join(site, "searchindex.js"), encoding="utf-8") as f:
        text = f.read()
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def _searchable_objects(index):
    return {f"{prefix}.{entry[4]}" if prefix else entry[4]
            for prefix, entries in index["objects"].items() for entry in entries}


def test_the_tables_are_read():
    with open(CLASSIC_PAGE, encoding="utf-8") as f:
        names = classic_names(f.read())
    # Served (~97), refused with a replacement (~41), the internals' families
    # and their names shown, the older served ones.
    assert len(names) > 250, len(names)
    for expected in ("jax.tree_multimap", "jax.tree_map", "jax.sharding.GSPMDSharding",
                     "jax.interpreters.pxla", "jax.core.ConcreteArray"):
        assert expected in names


def test_every_classic_name_is_found_by_the_search(site):
    with open(CLASSIC_PAGE, encoding="utf-8") as f:
        names = set(classic_names(f.read()))
    found = _searchable_objects(_search_index(site))
    missing = sorted(names - found)
    assert not missing, f"not in the site's search index: {missing}"


def test_the_site_shows_its_version_and_links_to_jax(site):
    import pmapkit
    with open(os.path.join(site, "index.html"), encoding="utf-8") as f:
        page = f.read()
    assert f"pmapkit {pmapkit.__version__}" in page
    assert "https://docs.jax.dev/en/latest/" in page
    with open(os.path.join(site, "pmap.html"), encoding="utf-8") as f:
        pmap_page = f.read()
    # Inline `jax.jit` in a page links into JAX's own reference (intersphinx).
    assert "https://docs.jax.dev/en/latest/_autosummary/jax.jit.html#jax.jit" in pmap_page


class _ShownText(HTMLParser):
    """The text a reader sees on a page, but code blocks (``<pre>``)."""

    def __init__(self):
        super().__init__()
        self.parts, self._hidden = [], 0

    def handle_starttag(self, tag, attrs):
        self._hidden += tag in ("pre", "script", "style")

    def handle_endtag(self, tag):
        self._hidden -= tag in ("pre", "script", "style")

    def handle_data(self, data):
        if not self._hidden:
            self.parts.append(data)


def test_the_reference_shows_no_markup(site):
    # A docstring's ``jax.Array``s does not end the literal: reST runs it on
    # to the next double backquote, and the page shows the backquotes and the
    # prose between as code. The strict build does not see it; the page does.
    pages = sorted(glob.glob(os.path.join(site, "reference", "*.html")))
    assert len(pages) > 10, pages
    shown = []
    for page in pages:
        with open(page, encoding="utf-8") as f:
            parser = _ShownText()
            parser.feed(f.read())
        text = "".join(parser.parts)
        shown += [f"{os.path.basename(page)}: ...{m.group(0)}..."
                  for m in re.finditer(r".{0,50}``.{0,50}", text)]
    assert not shown, "\n".join(shown)


def test_tables_fit_the_page(site):
    # The theme keeps inline code on one line (white-space: pre), so a table
    # of long code cells (the migrate rules) grew past the page and hid its
    # last column behind a scrollbar. docs/_static/pmapkit.css lets a cell's
    # code wrap; every page with a table loads it.
    with open(os.path.join(site, "_static", "pmapkit.css"), encoding="utf-8") as f:
        css = f.read()
    rule = re.search(r"td code\.literal span\.pre\s*\{([^}]*)\}", css)
    assert rule and re.search(r"white-space:\s*normal", rule.group(1)), css
    assert re.search(r"overflow-wrap:\s*anywhere", rule.group(1)), css
    tables = 0
    for page in glob.glob(os.path.join(site, "**", "*.html"), recursive=True):
        with open(page, encoding="utf-8") as f:
            html = f.read()
        if "<table" in html and "<td" in html:
            tables += 1
            assert re.search(r'<link rel="stylesheet"[^>]*_static/pmapkit\.css', html), page
    assert tables >= 5, tables


def _inventory_entries(path):
    """name -> (role, uri) of a Sphinx inventory (version 2) file."""
    import zlib
    with open(path, "rb") as f:
        data = f.read()
    body = data.split(b"\n", 4)[4]
    entries = {}
    for line in zlib.decompress(body).decode().splitlines():
        name, role, _prio, uri, _display = line.split(" ", 4)
        entries[name] = (role, uri.replace("$", name) if uri.endswith("$") else uri)
    return entries


def test_the_jax_inventory_is_the_installed_jax_s():
    # docs/_inventories/jax.inv links the pages' `jax.jit` into JAX's docs;
    # made from the installed jax, it is remade when the jax pin moves.
    script = os.path.join(DOCS, "_tools", "jax_inventory.py")
    if not os.path.isfile(script):
        pytest.skip("no docs/ beside the tests; set PMAPKIT_CHECKOUT")
    out = subprocess.run([sys.executable, "-P", script, "--check"], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, (
        f"{out.stdout}{out.stderr[-2000:]}\nrun: python docs/_tools/jax_inventory.py")
    entries = _inventory_entries(os.path.join(DOCS, "_inventories", "jax.inv"))
    assert entries["jax.jit"] == ("py:function", "_autosummary/jax.jit.html#jax.jit")
    assert entries["jax.shard_map"][1] == "_autosummary/jax.shard_map.html#jax.shard_map"
    assert entries["jax.sharding.NamedSharding"] == (
        "py:class", "jax.sharding.html#jax.sharding.NamedSharding")
    assert entries["jax.sharding"] == ("py:module", "jax.sharding.html#module-jax.sharding")


def _ranked(site, word):
    """The site search's results for one word, best first, as Sphinx's
    searchtools orders text matches (a title match 15, a text match 5; the
    site's scorer, run by node, then adds its boosts; ties by title)."""
    import shutil
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run the site's search scorer")
    from sphinx.search.en import SearchEnglish
    stem = SearchEnglish({}).stem(word.lower())
    index = _search_index(site)
    scores = {}
    for key, weight in (("terms", 5), ("titleterms", 15)):   # a title match wins
        files = index[key].get(stem, [])
        for f in [files] if isinstance(files, int) else files:
            scores[f] = weight
    results = [[index["docnames"][f], index["titles"][f], "", "", s] for f, s in scores.items()]
    scorer = os.path.join(DOCS, "_ext", "search_scorer.js")
    out = subprocess.run(
        [node, "-e", "const {Scorer} = require(process.argv[1]);"
         "const rs = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
         "console.log(JSON.stringify(rs.map(r => Scorer.score(r))))", scorer],
        input=json.dumps(results), capture_output=True, text=True, timeout=60, check=True)
    for result, score in zip(results, json.loads(out.stdout)):
        result[4] = score
    results.sort(key=lambda r: (-r[4], r[1].lower()))
    return [r[0] for r in results]


def test_the_search_ranks_the_api_pages_first(site):
    # The site wires the scorer in, the changelog is not searched, and a
    # classic keyword finds its API reference page first, then its guide.
    with open(os.path.join(site, "_static", "language_data.js"), encoding="utf-8") as f:
        assert "REFERENCE_BOOST" in f.read()
    index = _search_index(site)
    changelog = index["docnames"].index("changelog")
    assert not [t for t, f in index["terms"].items()
                if f == changelog or (isinstance(f, list) and changelog in f)]
    ranked = _ranked(site, "in_axis_resources")
    reference = [d for d in ranked if d.startswith("reference/")]
    assert "reference/pmapkit.pjit" in reference, ranked
    assert ranked[:len(reference)] == reference, ranked        # the API pages first
    assert ranked.index("pjit") < ranked.index("classic-names"), ranked   # then pjit's guide


def test_the_long_tables_are_folded(site):
    # The classic-names page: every table of more than 40 rows is shown
    # closed (<details>), its rows still in the page; what shows open is a
    # fraction of the rows.
    with open(os.path.join(site, "classic-names.html"), encoding="utf-8") as f:
        page = f.read()
    tables = re.findall(r"<table.*?</table>", page, re.S)
    folded = [(int(rows), re.findall(r"<table.*?</table>", inside, re.S))
              for rows, inside in re.findall(
                  r'<details class="folded-table"><summary>(\d+) rows[^<]*</summary>(.*?)</details>',
                  page, re.S)]
    long_tables = [t for t in tables if t.count("<tr") - 1 > 40]
    assert long_tables and all(len(inside) == 1 for _, inside in folded)
    assert sorted(inside[0] for _, inside in folded) == sorted(long_tables)
    for rows, (table,) in folded:
        assert rows == table.count("<tr") - 1
    shown = re.sub(r'<details class="folded-table">.*?</details>', "", page, flags=re.S)
    assert shown.count("<tr") * 3 < page.count("<tr"), (shown.count("<tr"), page.count("<tr"))
