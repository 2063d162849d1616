/* cemctl serve: the dashboard's script. Loads fragments (the live runs table, the claims) and chart data from
   the same server, draws charts with the vendored uPlot and parallel coordinates on a canvas. Every text it
   shows is set as text (textContent, canvas), never as HTML; fragments are HTML the server escaped. */
(function () {
  "use strict";

  // ------------------------------------------------------------------ numbers
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var a = Math.abs(v);
    if (a >= 1e18) return v.toExponential(2);
    if (a !== 0 && a >= 1e5) {
      var units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
      for (var i = 0; i < units.length; i++) if (a >= units[i][0]) return +(v / units[i][0]).toPrecision(4) + units[i][1];
    }
    if (a !== 0 && a < 1e-3) return v.toExponential(2);
    return String(+v.toPrecision(5));
  }

  function alpha(hex, a) {
    var m = /^#([0-9a-f]{6})$/i.exec(hex || "");
    if (!m) return "rgba(120,120,120," + a + ")";
    var n = parseInt(m[1], 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }

  function textEl(tag, cls, text) {
    var el = document.createElement(tag);
    if (cls) el.className = cls;
    el.textContent = text;
    return el;
  }

  // ------------------------------------------------------------------ forms: GET without empty fields
  function submitClean(form) {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (v, k) {
      if (typeof v === "string" && v.trim() !== "") params.append(k, v);
    });
    var q = params.toString();
    window.location.href = form.getAttribute("action") + (q ? "?" + q : "");
  }

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement) || (form.method || "get").toLowerCase() !== "get") return;
    ev.preventDefault();
    submitClean(form);
  });

  document.addEventListener("change", function (ev) {
    var t = ev.target;
    if (t && t.form && t.form.hasAttribute("data-autosubmit")) submitClean(t.form);
    updateCompareButtons();
  });

  function updateCompareButtons() {
    var buttons = document.querySelectorAll("button[data-need]");
    for (var i = 0; i < buttons.length; i++) {
      var b = buttons[i];
      var form = b.form;
      if (!form || !form.id) continue;
      var n = document.querySelectorAll('input[type=checkbox][form="' + form.id + '"]:checked').length;
      var need = parseInt(b.getAttribute("data-need"), 10) || 2;
      b.disabled = n < need;
      var note = form.querySelector(".need-note");
      if (note) note.textContent = n < need ? "pick at least " + need + " (" + n + " picked)" : n + " picked";
    }
  }

  // ------------------------------------------------------------------ fragments (live table, claims)
  function loadFragment(el) {
    var url = el.getAttribute("data-fragment");
    var timer = null;
    function schedule() {
      var inner = el.querySelector("[data-refresh-s]");
      var s = inner ? parseFloat(inner.getAttribute("data-refresh-s")) : 0;
      if (s > 0) timer = setTimeout(refresh, s * 1000);
    }
    function refresh() {
      if (document.hidden) { timer = setTimeout(refresh, 2000); return; }
      fetch(url, {headers: {"Accept": "text/html"}, cache: "no-store"}).then(function (r) {
        return r.text().then(function (t) { return {ok: r.ok, status: r.status, text: t}; });
      }).then(function (res) {
        if (!res.ok) {
          var msg = el.querySelector(".fragment-error") || el.appendChild(textEl("p", "fragment-error error", ""));
          msg.textContent = "could not refresh (HTTP " + res.status + "); retrying";
          timer = setTimeout(refresh, 10000);
          return;
        }
        var picked = {};
        var boxes = el.querySelectorAll("input[type=checkbox]:checked");
        for (var i = 0; i < boxes.length; i++) picked[boxes[i].value] = true;
        el.innerHTML = res.text; // HTML rendered and escaped by the server's templates
        boxes = el.querySelectorAll("input[type=checkbox]");
        for (var j = 0; j < boxes.length; j++) if (picked[boxes[j].value]) boxes[j].checked = true;
        el.setAttribute("data-loaded", "1");
        updateCompareButtons();
        schedule();
      }).catch(function () { timer = setTimeout(refresh, 10000); });
    }
    if (el.querySelector("[data-refresh-s]")) schedule(); else refresh();
    return function () { if (timer) clearTimeout(timer); };
  }

  // ------------------------------------------------------------------ charts (uPlot)
  var charts = [];

  function chartHeight() { return window.innerWidth < 600 ? 230 : 300; }

  function drawChart(parent, c) {
    var box = document.createElement("div");
    box.className = "chart-box";
    parent.appendChild(box);
    if (c.title) box.appendChild(textEl("div", "panel-title", c.title));
    var cats = c.categories;
    var data = [c.x];
    var series = [{label: c.x_label || "x", value: function (u, v) {
      if (v === null || v === undefined) return "–";
      return cats ? (cats[Math.round(v)] !== undefined ? cats[Math.round(v)] : "") : fmt(v);
    }}];
    var bands = [], hidden = [], whiskers = [];
    var lo = Infinity, hi = -Infinity;
    function track(arr) {
      for (var k = 0; k < arr.length; k++) {
        var v = arr[k];
        if (v !== null && isFinite(v) && (!c.log_y || v > 0)) { if (v < lo) lo = v; if (v > hi) hi = v; }
      }
    }
    c.series.forEach(function (s) {
      var i = data.length;
      data.push(s.y);
      track(s.y);
      var opts = {label: s.label, stroke: s.color, width: 1.6, spanGaps: true,
                  points: {show: !!s.points || (!s.lines), size: 6, fill: s.color, stroke: s.color}};
      if (s.dash) opts.dash = s.dash;
      if (s.lines === false) opts.paths = function () { return null; };
      if (s.lo && s.hi && s.whiskers) {
        var slo = s.lo, shi = s.hi, sn = s.n;
        opts.value = function (u, v, si, di) {
          if (v === null || v === undefined) return "–";
          var t = fmt(v);
          if (di !== null && di !== undefined && slo[di] !== null && shi[di] !== null) t += " [" + fmt(slo[di]) + ", " + fmt(shi[di]) + "]";
          if (sn && di !== null && di !== undefined) t += " n=" + sn[di];
          return t;
        };
        whiskers.push({i: i, lo: slo, hi: shi, color: s.color});
        track(slo); track(shi);
      } else {
        opts.value = function (u, v) { return fmt(v); };
      }
      series.push(opts);
      if (s.lo && s.hi && !s.whiskers) {
        data.push(s.hi, s.lo);
        track(s.hi); track(s.lo);
        var band = {label: "", stroke: "transparent", width: 0, spanGaps: true, points: {show: false},
                    value: function () { return ""; }};
        series.push(Object.assign({}, band), Object.assign({}, band));
        bands.push({series: [i + 1, i + 2], fill: alpha(s.color, 0.16)});
        hidden.push(i + 1, i + 2);
      }
    });
    var xScale = {time: false};
    var logTicks = null;
    if (c.log_x && c.x.every(function (v) { return v === null || v > 0; })) {
      xScale.distr = 3;
      var xs = c.x.filter(function (v) { return v !== null; });
      var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs);
      xScale.range = function () { return [xmin / 1.25, xmax * 1.25]; };
      if (xs.length <= 12) logTicks = xs;  // a grid's few values: a tick at each
    }
    if (cats) xScale.range = function () { return [-0.5, cats.length - 0.5]; };
    var yScale = {};
    if (c.log_y && lo > 0) {
      yScale.distr = 3;
      yScale.range = function () { return [lo / 1.15, hi * 1.15]; };
    } else if (isFinite(lo)) {
      yScale.range = function (u, min, max) {
        var a = Math.min(min === null ? lo : min, lo), b = Math.max(max === null ? hi : max, hi);
        var pad = (b - a) * 0.08 || Math.abs(a) * 0.05 || 1;
        return [a - pad, b + pad];
      };
    }
    var longCats = cats && (cats.length > 5 || cats.some(function (t) { return String(t).length > 10; }));
    var xAxis = {label: c.x_label, stroke: "#444", grid: {stroke: "#eee"}, ticks: {stroke: "#ddd"},
                 values: cats ? function (u, splits) { return splits.map(function (v) { return cats[v] !== undefined ? cats[v] : ""; }); }
                              : function (u, splits) { return splits.map(function (v) { return v === null ? "" : fmt(v); }); }};
    if (cats) xAxis.splits = function () { return cats.map(function (_, k) { return k; }); };
    if (logTicks) xAxis.splits = function () { return logTicks; };
    if (longCats) { xAxis.rotate = -28; xAxis.size = 80; }
    var yAxis = {label: c.y_label, stroke: "#444", grid: {stroke: "#eee"}, ticks: {stroke: "#ddd"},
                 size: function (u, values) {  // room for the longest tick value and the label beside it ('0.00205')
                   var n = 0;
                   (values || []).forEach(function (v) { n = Math.max(n, String(v === null || v === undefined ? "" : v).length); });
                   return Math.max(62, Math.round(n * 7 + 46));
                 },
                 values: function (u, splits) { return splits.map(function (v) { return v === null ? "" : fmt(v); }); }};
    var opts = {
      width: Math.max(260, box.clientWidth || parent.clientWidth || 600),
      height: chartHeight(),
      scales: {x: xScale, y: yScale},
      axes: [xAxis, yAxis],
      series: series,
      bands: bands,
      cursor: {points: {size: 7}},
      legend: {live: true},
      hooks: {draw: [function (u) {
        if (!whiskers.length) return;
        var ctx = u.ctx;
        ctx.save();
        whiskers.forEach(function (w) {
          if (!u.series[w.i].show) return;
          ctx.strokeStyle = w.color;
          ctx.lineWidth = 1.4 * devicePixelRatio;
          var cap = 4 * devicePixelRatio;
          for (var k = 0; k < u.data[0].length; k++) {
            if (w.lo[k] === null || w.hi[k] === null || u.data[0][k] === null) continue;
            var x = u.valToPos(u.data[0][k], "x", true);
            var y1 = u.valToPos(w.lo[k], "y", true), y2 = u.valToPos(w.hi[k], "y", true);
            ctx.beginPath();
            ctx.moveTo(x, y1); ctx.lineTo(x, y2);
            ctx.moveTo(x - cap, y1); ctx.lineTo(x + cap, y1);
            ctx.moveTo(x - cap, y2); ctx.lineTo(x + cap, y2);
            ctx.stroke();
          }
        });
        ctx.restore();
      }]}
    };
    var u = new uPlot(opts, data, box);
    var rows = u.root.querySelectorAll(".u-legend .u-series");
    hidden.forEach(function (k) { if (rows[k]) rows[k].style.display = "none"; });
    charts.push({u: u, box: box});
  }

  function loadChart(el) {
    var url = el.getAttribute("data-chart");
    el.textContent = "";
    el.appendChild(textEl("p", "chart-note", "loading…"));
    fetch(url, {headers: {"Accept": "application/json"}}).then(function (r) {
      return r.json().then(function (j) { return {ok: r.ok, j: j}; });
    }).then(function (res) {
      el.textContent = "";
      var j = res.j || {};
      if (!res.ok || j.error) { el.appendChild(textEl("p", "chart-error", j.error || "could not load the chart")); return; }
      if (!j.charts || !j.charts.length || !j.charts.some(function (c) { return c.series.length; })) {
        el.appendChild(textEl("p", "chart-note", j.note || "nothing to draw yet"));
        return;
      }
      j.charts.forEach(function (c) { if (c.series.length) drawChart(el, c); });
      if (j.note) el.appendChild(textEl("p", "chart-note", j.note));
    }).catch(function (e) {
      el.textContent = "";
      el.appendChild(textEl("p", "chart-error", "could not load the chart: " + e));
    });
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      charts.forEach(function (c) { c.u.setSize({width: Math.max(260, c.box.clientWidth), height: chartHeight()}); });
      parallels.forEach(function (p) { p(); });
    }, 150);
  });

  // ------------------------------------------------------------------ parallel coordinates
  var parallels = [];

  function colorOf(t) { // t in [0, 1]: blue (low) -> grey -> red (high)
    var a = [42, 111, 219], m = [170, 170, 170], b = [214, 39, 40];
    var p = t < 0.5 ? a : m, q = t < 0.5 ? m : b, f = t < 0.5 ? t * 2 : (t - 0.5) * 2;
    return "rgb(" + [0, 1, 2].map(function (k) { return Math.round(p[k] + (q[k] - p[k]) * f); }).join(",") + ")";
  }

  function drawParallel(el, d) {
    el.textContent = "";
    if (!d.lines.length) { el.appendChild(textEl("p", "chart-note", d.note || "no run with this metric yet")); return; }
    var canvas = document.createElement("canvas");
    var tip = textEl("div", "tip", "");
    el.appendChild(canvas); el.appendChild(tip);
    el.appendChild(textEl("p", "chart-note", d.note || ""));
    var axes = d.axes, lines = d.lines, brush = {};
    var scales = axes.map(function (a, k) {
      if (a.categorical) return {min: 0, max: Math.max(1, a.categories.length - 1), log: false};
      var vals = lines.map(function (l) { return l.values[k]; });
      var mn = Math.min.apply(null, vals), mx = Math.max.apply(null, vals);
      if (a.log) { mn = Math.log10(mn); mx = Math.log10(mx); }
      if (mn === mx) { mn -= 1; mx += 1; }
      return {min: mn, max: mx, log: a.log};
    });
    var metricIdx = axes.length - 1;
    var geo = {};
    function norm(k, v) {
      var s = scales[k];
      var x = s.log ? Math.log10(v) : v;
      var a = axes[k];
      if (a.categorical && a.categories.length === 1) return 0.5;
      return (x - s.min) / (s.max - s.min);
    }
    function kept(l) {
      for (var k in brush) {
        var t = norm(+k, l.values[k]);
        if (t < brush[k][0] || t > brush[k][1]) return false;
      }
      return true;
    }
    function layout() {
      var w = Math.max(300, el.clientWidth), h = window.innerWidth < 600 ? 320 : 420;
      var dpr = window.devicePixelRatio || 1;
      canvas.width = w * dpr; canvas.height = h * dpr;
      canvas.style.height = h + "px";
      var left = 60, right = 60, top = 34, bottom = 26;
      geo = {w: w, h: h, dpr: dpr, top: top, bottom: bottom,
             xs: axes.map(function (_, k) { return left + (w - left - right) * (axes.length === 1 ? 0.5 : k / (axes.length - 1)); })};
      paint(null);
    }
    function yOf(t) { return geo.top + (1 - t) * (geo.h - geo.top - geo.bottom); }
    function paint(hover) {
      var ctx = canvas.getContext("2d");
      ctx.setTransform(geo.dpr, 0, 0, geo.dpr, 0, 0);
      ctx.clearRect(0, 0, geo.w, geo.h);
      ctx.lineWidth = 1.2;
      lines.forEach(function (l) {
        var on = kept(l);
        ctx.strokeStyle = on ? colorOf(norm(metricIdx, l.values[metricIdx])) : "rgba(200,200,200,0.35)";
        ctx.globalAlpha = on ? 0.75 : 0.5;
        ctx.beginPath();
        l.values.forEach(function (v, k) { var y = yOf(norm(k, v)); if (k) ctx.lineTo(geo.xs[k], y); else ctx.moveTo(geo.xs[k], y); });
        ctx.stroke();
      });
      ctx.globalAlpha = 1;
      if (hover) {
        ctx.strokeStyle = "#111"; ctx.lineWidth = 2.6; ctx.beginPath();
        hover.values.forEach(function (v, k) { var y = yOf(norm(k, v)); if (k) ctx.lineTo(geo.xs[k], y); else ctx.moveTo(geo.xs[k], y); });
        ctx.stroke();
      }
      ctx.fillStyle = "#1d2330"; ctx.strokeStyle = "#555"; ctx.lineWidth = 1;
      ctx.font = "12px system-ui, sans-serif"; ctx.textAlign = "center";
      function label(s, x, y) {  // a value on an axis, with a white halo: readable where the lines cross it
        ctx.save(); ctx.lineWidth = 3; ctx.strokeStyle = "rgba(255,255,255,0.92)"; ctx.lineJoin = "round";
        ctx.strokeText(s, x, y); ctx.restore(); ctx.fillText(s, x, y);
      }
      axes.forEach(function (a, k) {
        var x = geo.xs[k];
        ctx.beginPath(); ctx.moveTo(x, yOf(1)); ctx.lineTo(x, yOf(0)); ctx.stroke();
        ctx.fillText(a.label.length > 22 ? a.label.slice(0, 21) + "…" : a.label, x, 16);
        ctx.font = "11px system-ui, sans-serif";
        if (a.categorical) {
          a.categories.forEach(function (c, i) { var t = norm(k, i); var s = String(c); label(s.length > 14 ? s.slice(0, 13) + "…" : s, x, yOf(t) - 3); });
        } else {
          var s = scales[k];
          var distinct = {};
          lines.forEach(function (l) { distinct[l.values[k]] = true; });
          var vals = Object.keys(distinct).map(Number);
          if (vals.length <= 8 && k !== metricIdx) {  // a grid axis: every value it takes
            vals.forEach(function (v) { label(fmt(v), x + 22, yOf(norm(k, v)) + 4); });
          } else {
            var top = s.log ? Math.pow(10, s.max) : s.max, bot = s.log ? Math.pow(10, s.min) : s.min;
            label(fmt(top), x, yOf(1) - 4); label(fmt(bot), x, yOf(0) + 13);
          }
        }
        if (brush[k]) {
          ctx.fillStyle = "rgba(42,111,219,0.18)";
          ctx.fillRect(x - 7, yOf(brush[k][1]), 14, yOf(brush[k][0]) - yOf(brush[k][1]));
          ctx.fillStyle = "#1d2330";
        }
        ctx.font = "12px system-ui, sans-serif";
      });
    }
    function nearest(mx, my) {
      var best = null, bestD = 8;
      lines.forEach(function (l) {
        if (!kept(l)) return;
        for (var k = 0; k + 1 < axes.length; k++) {
          var x0 = geo.xs[k], x1 = geo.xs[k + 1];
          if (mx < x0 || mx > x1) continue;
          var y0 = yOf(norm(k, l.values[k])), y1 = yOf(norm(k + 1, l.values[k + 1]));
          var y = y0 + (y1 - y0) * (mx - x0) / (x1 - x0);
          var dd = Math.abs(y - my);
          if (dd < bestD) { bestD = dd; best = l; }
        }
      });
      return best;
    }
    var drag = null;
    function pos(ev) { var r = canvas.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; }
    function axisAt(mx) { for (var k = 0; k < geo.xs.length; k++) if (Math.abs(geo.xs[k] - mx) < 10) return k; return -1; }
    function tOf(my) { return Math.min(1, Math.max(0, 1 - (my - geo.top) / (geo.h - geo.top - geo.bottom))); }
    canvas.addEventListener("mousedown", function (ev) {
      var p = pos(ev), k = axisAt(p[0]);
      if (k >= 0) { drag = {k: k, t0: tOf(p[1])}; ev.preventDefault(); }
    });
    window.addEventListener("mouseup", function (ev) {
      if (!drag) return;
      var t1 = tOf(pos(ev)[1]);
      if (Math.abs(t1 - drag.t0) < 0.01) delete brush[drag.k]; else brush[drag.k] = [Math.min(drag.t0, t1), Math.max(drag.t0, t1)];
      drag = null; paint(null);
    });
    canvas.addEventListener("mousemove", function (ev) {
      var p = pos(ev);
      if (drag) { var t = tOf(p[1]); brush[drag.k] = [Math.min(drag.t0, t), Math.max(drag.t0, t)]; paint(null); return; }
      var l = nearest(p[0], p[1]);
      canvas.style.cursor = l ? "pointer" : (axisAt(p[0]) >= 0 ? "ns-resize" : "default");
      paint(l);
      if (!l) { tip.style.display = "none"; return; }
      var text = l.run + (l.label ? "  " + l.label : "") + "\n" + axes.map(function (a, k) {
        return a.label + ": " + (a.categorical ? a.categories[l.values[k]] : fmt(l.values[k]));
      }).join("\n");
      tip.textContent = text;
      tip.style.display = "block";
      tip.style.left = Math.min(p[0] + 12, geo.w - 220) + "px";
      tip.style.top = (p[1] + 12) + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; if (!drag) paint(null); });
    canvas.addEventListener("click", function (ev) {
      var p = pos(ev), l = nearest(p[0], p[1]);
      if (l && axisAt(p[0]) < 0) window.location.href = "/runs/" + encodeURIComponent(l.run);
    });
    layout();
    parallels.push(layout);
  }

  function loadParallel(el) {
    fetch(el.getAttribute("data-parallel"), {headers: {"Accept": "application/json"}}).then(function (r) {
      return r.json().then(function (j) { return {ok: r.ok, j: j}; });
    }).then(function (res) {
      if (!res.ok || res.j.error) { el.textContent = ""; el.appendChild(textEl("p", "chart-error", res.j.error || "could not load")); return; }
      drawParallel(el, res.j);
    }).catch(function (e) { el.textContent = ""; el.appendChild(textEl("p", "chart-error", "could not load: " + e)); });
  }

  // ------------------------------------------------------------------ start
  function start() {
    var i, els = document.querySelectorAll("[data-fragment]");
    for (i = 0; i < els.length; i++) loadFragment(els[i]);
    els = document.querySelectorAll("[data-chart]");
    for (i = 0; i < els.length; i++) loadChart(els[i]);
    els = document.querySelectorAll("[data-parallel]");
    for (i = 0; i < els.length; i++) loadParallel(els[i]);
    updateCompareButtons();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
