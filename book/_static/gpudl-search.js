// The search page's excerpts (book/_ext/gpudl_search.py).
//
// 1. Every result has one, wherever the book is read from. Sphinx's searchtools downloads a
//    result's page with fetch() to cut the excerpt from, which a browser refuses for a book
//    opened from the disk (file://): the results showed their titles alone. The build writes
//    each page's text as a script, _search/<page>.js, which a <script> tag loads anywhere (as
//    the search index is loaded); the page's fetch() is answered with it. The text is the
//    page's own, so an excerpt never comes from the theme's navigation around it.
// 2. An excerpt's formulas are still their TeX source (MathJax typesets them only on the page
//    itself): show "108 × 64", not "\(108 \times 64\)".
const gpudlPageTexts = {};  // page name: its text's promise
const gpudlWaiting = {};  // page name: the resolver its script calls

// called by each _search/<page>.js
function gpudlSearchText(pagename, html) {
  const resolve = gpudlWaiting[pagename];
  delete gpudlWaiting[pagename];
  if (resolve) resolve(html);
}

const gpudlLoadPageText = (root, pagename) => {
  if (!(pagename in gpudlPageTexts)) {
    gpudlPageTexts[pagename] = new Promise((resolve, reject) => {
      gpudlWaiting[pagename] = resolve;
      const script = document.createElement("script");
      script.src = `${root}_search/${pagename}.js`;
      script.onerror = reject;
      document.head.appendChild(script);
    });
  }
  return gpudlPageTexts[pagename];
};

document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;
  const root = document.documentElement.dataset.content_root || "";
  const suffix = DOCUMENTATION_OPTIONS.FILE_SUFFIX || ".html";
  const pageFetch = window.fetch ? window.fetch.bind(window) : null;
  window.fetch = (resource, options) => {
    const url = typeof resource === "string" ? resource : "";
    const pagename = url.startsWith(root) && url.endsWith(suffix)
      ? url.slice(root.length, url.length - suffix.length) : null;
    const known = pagename && Search._index && Search._index.docnames.includes(pagename);
    if (!known) return pageFetch(resource, options);
    return gpudlLoadPageText(root, pagename).then(
      (html) => new Response(html, {headers: {"Content-Type": "text/html"}}),
      () => pageFetch(resource, options));
  };

  const pageText = Search.htmlToText;
  const untex = (tex) => tex
    .replace(/\\times/g, "×").replace(/\\approx/g, "≈").replace(/\\le(q)?/g, "≤")
    .replace(/\\ge(q)?/g, "≥").replace(/\\cdot/g, "·").replace(/\\[,;!: ]/g, " ")
    .replace(/\\[a-zA-Z]+/g, "").replace(/[{}]/g, "").replace(/\s+/g, " ").trim();
  Search.htmlToText = (htmlString, anchor) => pageText(htmlString, anchor)
    .replace(/\\\(([\s\S]*?)\\\)/g, (_, tex) => untex(tex))
    .replace(/\\\[([\s\S]*?)\\\]/g, (_, tex) => untex(tex));
});
