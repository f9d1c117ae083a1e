// MathJax 3 for pymdownx.arithmatex (generic mode): \( ... \) inline, \[ ... \] and $$ ... $$ display. Loaded before
// javascripts/mathjax/tex-mml-chtml.js, the copy of MathJax that docs/hooks/offline_math.py puts in the site (no CDN).
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"], ["$$", "$$"]], processEscapes: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
};
// A page swapped in by Material's instant navigation is typeset again, after any typesetting still running. The
// first page is MathJax's own startup typesetting: typesetting it twice would read the MathML that MathJax adds for
// screen readers as new math (nested formulas), and two passes at once replace the same nodes (an error).
if (typeof document$ !== "undefined") {
  let first = true;
  document$.subscribe(() => {
    if (first) { first = false; return; }
    if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) { return; }
    MathJax.startup.promise = MathJax.startup.promise.then(() => {
      MathJax.typesetClear();
      MathJax.texReset();
      return MathJax.typesetPromise();
    });
  });
}
