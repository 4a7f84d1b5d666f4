// The search page's result snippets are taken from each page's text, where a formula is still
// its TeX source (MathJax typesets it only on the page itself): show "108 × 64", not
// "\(108 \times 64\)".
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;
  const pageText = Search.htmlToText;
  const untex = (tex) => tex
    .replace(/\\times/g, "×").replace(/\\approx/g, "≈").replace(/\\le(q)?/g, "≤")
    .replace(/\\ge(q)?/g, "≥").replace(/\\cdot/g, "·").replace(/\\[,;!: ]/g, " ")
    .replace(/\\[a-zA-Z]+/g, "").replace(/[{}]/g, "").replace(/\s+/g, " ").trim();
  Search.htmlToText = (htmlString, anchor) => pageText(htmlString, anchor)
    .replace(/\\\(([\s\S]*?)\\\)/g, (_, tex) => untex(tex))
    .replace(/\\\[([\s\S]*?)\\\]/g, (_, tex) => untex(tex));
});
