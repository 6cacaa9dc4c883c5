"""Long tables folded: a table of more than ``fold_table_rows`` rows (conf.py,
default 40) is shown closed, in an HTML ``<details>`` whose summary says
how many rows it holds and what its columns are. The classic-names page
holds four tables of 35 to 185 rows (tens of thousands of pixels open);
folded at build time, the pages and the tools that write their tables stay
plain Markdown. The rows are still in the page: the browser's find and the
site's search see them."""
from docutils import nodes

DEFAULT_ROWS = 40


def _body_rows(table):
    return [row for body in table.findall(nodes.tbody) for row in body.children
            if isinstance(row, nodes.row)]


def _header(table):
    for head in table.findall(nodes.thead):
        for row in head.children:
            return [entry.astext() for entry in row.children]
    return []


def fold_long_tables(app, doctree, docname):
    if app.builder.format != "html":
        return
    limit = app.config.fold_table_rows
    for table in list(doctree.findall(nodes.table)):
        rows = len(_body_rows(table))
        if rows <= limit:
            continue
        columns = " | ".join(_header(table))
        summary = f"{rows} rows" + (f": {columns}" if columns else "") + " (open)"
        summary = summary.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parent, at = table.parent, table.parent.index(table)
        parent.insert(at + 1, nodes.raw("", "</details>", format="html"))
        parent.insert(at, nodes.raw(
            "", f'<details class="folded-table"><summary>{summary}</summary>', format="html"))


def setup(app):
    app.add_config_value("fold_table_rows", DEFAULT_ROWS, "html")
    app.connect("doctree-resolved", fold_long_tables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
