// torch-advisor report: optional enhancements only (the page is complete without JavaScript).
// Copy buttons for fix snippets, sortable summary table, expand/collapse all findings.
(function () {
  "use strict";

  function copyText(text, done) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(text, done); });
    } else {
      fallback(text, done);
    }
  }

  function fallback(text, done) {
    var ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    try { document.execCommand("copy"); done(); } catch (e) { /* nothing to do */ }
    document.body.removeChild(ta);
  }

  document.querySelectorAll("button.copy[data-copy]").forEach(function (btn) {
    var target = document.getElementById(btn.getAttribute("data-copy"));
    if (!target) { return; }
    btn.hidden = false;
    btn.addEventListener("click", function () {
      copyText(target.textContent, function () {
        btn.textContent = "Copied";
        setTimeout(function () { btn.textContent = "Copy"; }, 1500);
      });
    });
  });

  var SEV = { high: 0, medium: 1, low: 2, info: 3 };

  function cellValue(row, idx, kind) {
    var cell = row.cells[idx];
    var v = cell ? (cell.getAttribute("data-value") || cell.textContent) : "";
    if (kind === "num") { return parseFloat(v) || 0; }
    if (kind === "sev") { return v in SEV ? SEV[v] : 9; }
    return v.toLowerCase();
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("th[data-sort]");
    heads.forEach(function (th) {
      th.setAttribute("tabindex", "0");
      th.setAttribute("title", "Sort");
      function sort() {
        var idx = th.cellIndex;
        var kind = th.getAttribute("data-sort");
        var asc = th.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a, idx, kind), y = cellValue(b, idx, kind);
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (ev) {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); sort(); }
      });
    });
  });

  document.querySelectorAll(".toolbar").forEach(function (bar) {
    bar.hidden = false;
    bar.addEventListener("click", function (ev) {
      var action = ev.target.getAttribute && ev.target.getAttribute("data-action");
      if (!action) { return; }
      document.querySelectorAll("details.card").forEach(function (d) { d.open = action === "expand"; });
    });
  });

  // following a link to a collapsed finding opens it
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    if (el && el.tagName === "DETAILS") { el.open = true; }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
})();
