// MathJax for pymdownx.arithmatex (generic mode): \( ... \) inline, $$ ... $$ display; re-typeset on page changes.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"], ["$$", "$$"]], processEscapes: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
};
if (typeof document$ !== "undefined") {
  document$.subscribe(() => { if (MathJax.typesetPromise) { MathJax.typesetPromise(); } });
}
