// jobq dashboard: the few things pages do in the browser. No inline script anywhere (the CSP forbids it):
// charts read their data from <script type="application/json"> blocks; everything else is plain HTML
// forms and htmx attributes.
(function () {
  "use strict";

  var TZ_KEY = "jobq.times";
  function localTimes() { return localStorage.getItem(TZ_KEY) === "local"; }

  function readData(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  // axis labels short enough for the axis' width: 12, 1.5k, 20k, 1.2M (never a clipped "0,000")
  function compact(v) {
    var a = Math.abs(v);
    if (a >= 1e6) return +(v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e3) return +(v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
    return String(+v.toFixed(a >= 10 ? 0 : a >= 1 ? 1 : 2));
  }
  // a latency in ms as people read it: 250ms, 1.5s, 20s, 3m, 2h
  function duration(ms) {
    if (ms < 1000) return Math.round(ms) + "ms";
    if (ms < 60000) return +(ms / 1000).toFixed(ms < 10000 ? 1 : 0) + "s";
    if (ms < 3600000) return +(ms / 60000).toFixed(ms < 600000 ? 1 : 0) + "m";
    return +(ms / 3600000).toFixed(1) + "h";
  }

  function drawChart(box) {
    var data = readData(box.dataset.series);
    if (!data || !data.at_ms || data.at_ms.length < 1 || typeof uPlot === "undefined") return;
    var xs = data.at_ms.map(function (t) { return t / 1000; });
    var width = Math.max(280, box.clientWidth || 560);
    // from the first sample on when collecting began inside the range: no empty day before it
    var x = { time: true, range: [Math.max(data.since_ms / 1000, xs[0]), data.until_ms / 1000] };
    var wait = box.dataset.kind === "wait";
    var fmt = wait ? duration : compact;
    var axes = [
      {},
      { size: 56, values: function (u, splits) { return splits.map(fmt); } },
    ];
    var series, lines;
    if (wait) {
      series = [xs, data.wait_ms];
      lines = [{}, { label: "start latency", stroke: "#7a4fd6", spanGaps: true,
                     value: function (u, v) { return v == null ? "--" : duration(v); } }];
    } else {
      series = [xs, data.enqueued, data.completed, data.failed];
      lines = [{}, { label: "enqueued/s", stroke: "#2f6fdb" }, { label: "completed/s", stroke: "#1f9d55" },
               { label: "failed/s", stroke: "#d64545" }];
    }
    var opts = { width: width, height: 180, scales: { x: x }, axes: axes, series: lines };
    if (!localTimes()) opts.tzDate = function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); };
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

  // Times come as <time datetime="..."> in UTC; the reader may have them in the browser's zone instead
  // (the header's toggle, kept in localStorage).
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localText(d) {
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function showTimes(root) {
    var local = localTimes();
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      t.textContent = local ? localText(d) : d.toISOString().slice(0, 19).replace("T", " ");
    });
    var toggle = document.getElementById("tz-toggle");
    if (toggle) toggle.textContent = local ? "times: local" : "times: UTC";
  }

  function init(root) {
    root.querySelectorAll(".chart[data-series]").forEach(drawChart);
    root.querySelectorAll("input[data-select-all]").forEach(selectAll);
    showTimes(root);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var toggle = document.getElementById("tz-toggle");
    if (toggle) toggle.addEventListener("click", function () {
      localStorage.setItem(TZ_KEY, localTimes() ? "utc" : "local");
      init(document);
    });
    init(document);
  });
  document.addEventListener("htmx:afterSwap", function (e) { init(e.target); });
})();
