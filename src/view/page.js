// The suite page's table (sortable, filterable) and the attempt sections
// shown one at a time. Every value comes from the JSON data block and is
// put into the page with textContent, never as markup.
(function () {
  "use strict";
  var dataEl = document.getElementById("runner-data");
  var data = dataEl ? JSON.parse(dataEl.textContent) : { attempts: [] };
  var body = document.body;
  var tbody = document.querySelector("#attempts tbody");
  var filter = document.getElementById("filter");
  var statusSel = document.getElementById("status");
  var sortKey = "order", sortDir = 1;
  var rank = { fail: 0, error: 1, interrupted: 2, missing: 3, skipped: 4, flagged: 5, pass: 6 };

  // A newline or tab in a task's name (a directory's) is shown as \n, \t.
  function oneCell(t) { return String(t).replace(/\n/g, "\\n").replace(/\t/g, "\\t"); }

  function signalsText(a) {
    var parts = [];
    if (a.signals) parts.push(a.signals + (a.signals === 1 ? " tamper signal" : " tamper signals"));
    if (a.loosenings) parts.push(a.loosenings + (a.loosenings === 1 ? " loosening" : " loosenings"));
    return parts.join(", ");
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }
  function fmtNum(v, digits) { return v === null || v === undefined ? "-" : Number(v).toFixed(digits); }
  function value(a, key) {
    if (key === "order") return [rank[a.status] === undefined ? 9 : rank[a.status], a.task, a.attempt];
    if (key === "total_ms") return a.phases ? a.phases.total_ms : 0;
    var v = a[key];
    return v === null || v === undefined ? -Infinity : v;
  }
  function cmp(x, y) {
    if (Array.isArray(x)) {
      for (var i = 0; i < x.length; i++) { var c = cmp(x[i], y[i]); if (c) return c; }
      return 0;
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  function bar(td, a) {
    var div = document.createElement("div");
    div.className = "bar";
    var p = a.phases || {};
    var max = data.max_total_ms || 1;
    ["image", "setup", "agent", "verifier"].forEach(function (k) {
      var ms = p[k + "_ms"] || 0;
      var s = document.createElement("span");
      s.className = "ph-" + k;
      s.style.width = (100 * ms / max).toFixed(2) + "%";
      s.title = k + " " + ms + " ms";
      div.appendChild(s);
    });
    td.appendChild(div);
    var t = document.createElement("div");
    t.className = "label";
    t.textContent = ((p.total_ms || 0) / 1000).toFixed(1) + " s";
    td.appendChild(t);
  }
  function render() {
    var q = (filter.value || "").toLowerCase();
    var st = statusSel.value;
    var rows = data.attempts.filter(function (a) {
      if (st && a.status !== st) return false;
      if (!q) return true;
      return (a.task + " " + a.status + " " + (a.reason || "")).toLowerCase().indexOf(q) >= 0;
    });
    rows.sort(function (x, y) { return sortDir * cmp(value(x, sortKey), value(y, sortKey)); });
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    rows.forEach(function (a) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-status", a.status);
      var td = cell(tr, "");
      if (a.anchor) {
        var link = document.createElement("a");
        link.href = "#" + a.anchor;
        link.textContent = oneCell(a.task) + " #" + a.attempt;
        td.appendChild(link);
      } else {
        td.textContent = oneCell(a.task) + " #" + a.attempt;
      }
      cell(tr, a.status, "st st-" + a.status);
      cell(tr, fmtNum(a.reward, 2), "num");
      cell(tr, Object.keys(a.metrics || {}).map(function (k) { return k + " " + a.metrics[k]; }).join(", "));
      cell(tr, String(a.steps), "num");
      cell(tr, "$" + fmtNum(a.cost_usd, 4), "num");
      bar(cell(tr, ""), a);
      cell(tr, signalsText(a), a.signals ? "signals-cell tamper" : "signals-cell");
      cell(tr, a.reason || "", a.reason ? "reason" : "");
      tbody.appendChild(tr);
    });
    document.getElementById("shown").textContent = rows.length + " of " + data.attempts.length + " shown";
    body.setAttribute("data-rows", String(rows.length));
  }
  function route() {
    var id = decodeURIComponent((location.hash || "").slice(1));
    var sections = document.querySelectorAll("section.attempt");
    var target = id ? document.getElementById(id) : null;
    var one = target && target.classList.contains("attempt");
    body.classList.toggle("one", !!one);
    for (var i = 0; i < sections.length; i++) sections[i].classList.toggle("shown", sections[i] === target);
    if (one) setTimeout(function () { window.scrollTo(0, 0); }, 0);
  }
  if (tbody) {
    body.classList.add("js");
    document.querySelectorAll("#attempts th[data-key]").forEach(function (th) {
      th.addEventListener("click", function () {
        var k = th.getAttribute("data-key");
        sortDir = k === sortKey ? -sortDir : 1;
        sortKey = k;
        document.querySelectorAll("#attempts th").forEach(function (o) { o.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(sortDir > 0 ? "sorted-asc" : "sorted-desc");
        render();
      });
    });
    filter.addEventListener("input", render);
    statusSel.addEventListener("change", render);
    render();
    window.addEventListener("hashchange", route);
    route();
  }
  body.setAttribute("data-js", "ready");
})();
