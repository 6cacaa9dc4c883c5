// The site search's scorer (conf.py's html_search_scorer): Sphinx's own
// weights, with the pages a reader searches an API name for ranked first.
// A term found in a page's text scores the same on every page that has it,
// and Sphinx then orders those pages by title: a guide, a long list of
// classic names or the migration page would come before the reference page
// of the very name typed (`in_axis_resources`). The API reference gains
// REFERENCE_BOOST, the pages of the five systems SYSTEM_BOOST: more than a
// title match (15) over a text match (5), so the reference comes first.
const REFERENCE_BOOST = 20;
const SYSTEM_BOOST = 10;
const SYSTEM_PAGES = new Set(["pmap", "pjit", "host_callback", "export",
                              "colocated_python", "multiprocess"]);

var Scorer = {
  score: (result) => {
    const [docname, , , , score] = result;
    if (docname.startsWith("reference/")) return score + REFERENCE_BOOST;
    if (SYSTEM_PAGES.has(docname)) return score + SYSTEM_BOOST;
    return score;
  },
  // Sphinx's weights, unchanged.
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};

if (typeof module !== "undefined") module.exports = { Scorer };
