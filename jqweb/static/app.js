// jobq dashboard: the few things pages do in the browser. No inline script anywhere (the CSP forbids it):
// charts read their data from <script type="application/json"> blocks; everything else is plain HTML
// forms and htmx attributes.
(function () {
  "use strict";

  function readData(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function drawChart(box) {
    var data = readData(box.dataset.series);
    if (!data || !data.at_ms || data.at_ms.length < 1 || typeof uPlot === "undefined") return;
    var xs = data.at_ms.map(function (t) { return t / 1000; });
    var width = Math.max(280, box.clientWidth || 560);
    var x = { time: true, range: [data.since_ms / 1000, data.until_ms / 1000] };
    var opts, series;
    if (box.dataset.kind === "wait") {
      series = [xs, data.wait_ms];
      opts = { width: width, height: 180, scales: { x: x },
               series: [{}, { label: "start latency ms", stroke: "#7a4fd6", spanGaps: true }] };
    } else {
      series = [xs, data.enqueued, data.completed, data.failed];
      opts = {
        width: width, height: 180, scales: { x: x },
        series: [{}, { label: "enqueued/s", stroke: "#2f6fdb" }, { label: "completed/s", stroke: "#1f9d55" },
                 { label: "failed/s", stroke: "#d64545" }],
      };
    }
    box.textContent = "";
    new uPlot(opts, series, box);
  }

  function selectAll(box) {
    box.addEventListener("change", function () {
      var form = box.closest("form");
      if (!form) return;
      form.querySelectorAll('input[type=checkbox][name="id"]').forEach(function (c) { c.checked = box.checked; });
    });
  }

  function init(root) {
    root.querySelectorAll(".chart[data-series]").forEach(drawChart);
    root.querySelectorAll("input[data-select-all]").forEach(selectAll);
  }

  document.addEventListener("DOMContentLoaded", function () { init(document); });
  document.addEventListener("htmx:afterSwap", function (e) { init(e.target); });
})();
