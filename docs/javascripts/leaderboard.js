// The leaderboard's table (a table inside <div class="gn-leaderboard">, written by analysis/leaderboard/page.py):
// a click on a column's heading sorts by it (again: the other way), numbers as numbers and empty cells last; a
// text box above it keeps the rows that hold every word typed. Plain JavaScript, no library, nothing fetched.
(function () {
  "use strict";

  function cellKey(row, column) {
    var cell = row.cells[column];
    var text = cell ? cell.textContent.trim() : "";
    var bare = text.replace(/^\u00b1\s*/, ""); // a CI cell sorts by its half-width
    var numeric = /^[+\-]?(\d+\.?\d*|\.\d+)(e[+\-]?\d+)?$/i.test(bare);
    var number = numeric ? parseFloat(bare) : NaN;
    return { empty: text === "", numeric: numeric, number: number, text: text.toLowerCase() };
  }

  function compare(a, b, ascending) {
    if (a.empty !== b.empty) return a.empty ? 1 : -1; // empty cells last either way
    var order;
    if (a.numeric && b.numeric) order = a.number - b.number;
    else order = a.text < b.text ? -1 : a.text > b.text ? 1 : 0;
    return ascending ? order : -order;
  }

  function sortBy(table, column, heading) {
    var body = table.tBodies[0];
    var ascending = heading.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(body.rows).map(function (row, index) {
      return { row: row, key: cellKey(row, column), index: index };
    });
    rows.sort(function (a, b) {
      return compare(a.key, b.key, ascending) || a.index - b.index; // stable
    });
    rows.forEach(function (item) {
      body.appendChild(item.row);
    });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (other) {
      other.removeAttribute("aria-sort");
    });
    heading.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function filterRows(table, query, counter) {
    var words = query.toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var text = row.textContent.toLowerCase();
      var keep = words.every(function (word) {
        return text.indexOf(word) !== -1;
      });
      row.hidden = !keep;
      shown += keep ? 1 : 0;
    });
    counter.textContent = shown + " of " + table.tBodies[0].rows.length + " cells";
  }

  // The table is wide (one column per fact, the command last): smaller type, notes wide enough to read, commands on
  // one line, the rows scrolling sideways inside the page rather than wrapping into tall cells.
  var STYLE =
    ".gn-leaderboard table { font-size: .68rem; }" +
    ".gn-leaderboard td:nth-last-child(2) { min-width: 22em; }" +
    ".gn-leaderboard td:nth-last-child(4) { white-space: nowrap; }" +
    ".gn-leaderboard td:last-child code { white-space: nowrap; }" +
    ".gn-leaderboard th[aria-sort=ascending]::after { content: ' \\25B2'; }" +
    ".gn-leaderboard th[aria-sort=descending]::after { content: ' \\25BC'; }" +
    ".gn-leaderboard-filter { width: 60%; padding: .3em .5em; margin-right: 1em; font: inherit;" +
    " border: 1px solid var(--md-default-fg-color--lighter, #999); border-radius: .2em;" +
    " color: inherit; background: transparent; }";

  function addStyle() {
    if (document.getElementById("gn-leaderboard-style")) return;
    var style = document.createElement("style");
    style.id = "gn-leaderboard-style";
    style.textContent = STYLE;
    document.head.appendChild(style);
  }

  function enhance(block) {
    var table = block.querySelector("table");
    if (!table || !table.tHead || !table.tBodies.length || block.dataset.ready) return;
    block.dataset.ready = "true";
    addStyle();
    var box = document.createElement("input");
    box.type = "search";
    box.placeholder = "Filter: e.g. cora gcnii 64";
    box.setAttribute("aria-label", "Filter the leaderboard's rows");
    box.className = "gn-leaderboard-filter";
    var counter = document.createElement("span");
    counter.className = "gn-leaderboard-count";
    counter.setAttribute("aria-live", "polite");
    block.insertBefore(counter, block.firstChild);
    block.insertBefore(box, counter);
    box.addEventListener("input", function () {
      filterRows(table, box.value, counter);
    });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (heading, column) {
      heading.tabIndex = 0;
      heading.style.cursor = "pointer";
      heading.title = "Sort by " + heading.textContent.trim();
      heading.addEventListener("click", function () {
        sortBy(table, column, heading);
      });
      heading.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(table, column, heading);
        }
      });
    });
    filterRows(table, "", counter);
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll(".gn-leaderboard"), enhance);
  }

  if (typeof document$ !== "undefined" && document$.subscribe) {
    document$.subscribe(start); // Material's instant navigation replaces the page without a load event
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
