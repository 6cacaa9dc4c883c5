"""The site's own Sphinx extension: three small things the pages need.

- ``{classic}`jax.tree_multimap``` (or ``{classic}`tree_multimap <jax.tree_multimap>```)
  shows the name as code and makes it an object of the site's search, with an
  anchor of its own: searching a classic name finds its row of the
  classic-names tables.
- Inline code naming a JAX or pmapkit object (``jax.jit``, ``jax.shard_map``,
  ``pmapkit.pjit``) links to its reference: JAX's through intersphinx, ours
  through autodoc. Code that names nothing known stays plain code.
- A ```` ```python notest ```` fence (a block tests/_doc_blocks.py does not
  run) is shown with a caption saying so.
"""
import re

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinx.util.nodes import make_id, split_explicit_title

CLASSIC_TYPE = "classic-name"
_DOTTED = re.compile(r"^(?:jax|pmapkit)(?:\.[A-Za-z_]\w*)+(?:\(\))?$")
_NOTEST = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*python[ \t]+notest[ \t]*$",
                     re.MULTILINE)


def classic_role(name, rawtext, text, lineno, inliner, options=None, content=()):
    """A classic name as code, with an anchor and an entry in the search index.

    A name met again (``jax.util`` is both a served module and the family of
    its internals) keeps its first anchor: the search finds that one.
    """
    env = inliner.document.settings.env
    _, title, target = split_explicit_title(text)
    target = target.strip()
    std = env.domains.standard_domain
    code = nodes.literal(rawtext, title, classes=["classic-name"])
    if (CLASSIC_TYPE, target) in std.objects:
        return [code], []
    node_id = make_id(env, inliner.document, "classic", target)
    std.note_object(CLASSIC_TYPE, target, node_id, location=(env.docname, lineno))
    anchor = nodes.inline("", "", ids=[node_id])
    return [anchor, code], []


class LinkNamedCode(SphinxTransform):
    """Inline code that is exactly a dotted JAX or pmapkit name becomes a
    reference to it, resolved late (our objects, then JAX's inventory) and
    left as plain code, without a warning, when nothing answers."""

    default_priority = 500

    def apply(self, **kwargs):
        for literal in list(self.document.findall(nodes.literal)):
            text = literal.astext()
            if not _DOTTED.match(text) or "classic-name" in literal["classes"]:
                continue
            if self._inside_link_or_heading(literal):
                continue
            target = text[:-2] if text.endswith("()") else text
            ref = addnodes.pending_xref(
                "", refdomain="py", reftype="obj", reftarget=target,
                refexplicit=True, refwarn=False, refdoc=self.env.docname)
            literal.replace_self(ref)
            ref += literal

    @staticmethod
    def _inside_link_or_heading(node):
        parent = node.parent
        while parent is not None:
            if isinstance(parent, (nodes.reference, addnodes.pending_xref, nodes.title,
                                   addnodes.desc_signature, nodes.literal_block)):
                return True
            parent = parent.parent
        return False


def caption_notest_fences(app, docname, source):
    """```python notest -> a code-block captioned "not run by the doc tests"."""
    source[0] = _NOTEST.sub(
        lambda m: (f"{m['indent']}{m['fence']}{{code-block}} python\n"
                   f"{m['indent']}:caption: not run by the doc tests"), source[0])


def setup(app):
    app.add_object_type(CLASSIC_TYPE, CLASSIC_TYPE, objname="classic JAX name")
    app.add_role("classic", classic_role)
    app.add_transform(LinkNamedCode)
    app.connect("source-read", caption_notest_fences)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
