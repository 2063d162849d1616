/* cemctl serve: the dashboard's script. Loads fragments (the live runs table, the arms, the claims) and chart data
   from the same server on one clock, draws charts with the vendored uPlot and parallel coordinates on a canvas.
   Every text it shows is set as text (textContent, canvas), never as HTML; fragments are HTML the server escaped. */
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

  // ------------------------------------------------------------------ the page's clock (tables, claims, charts)
  // The parts of a page that refresh themselves (fragments of HTML, charts) run on one clock: a part asks again after
  // the period its last answer gave (the server's data-refresh-s or refresh_s), parts due within a second of each
  // other are asked for at one moment (X-Cemctl-Moment: the server reads the run folders once for them) and parts
  // of one period are shown at once, so the runs table, the arms table and the metric chart never show two
  // different moments of one launch.
  var parts = [], clock = null, page = Math.random().toString(36).slice(2);

  function fetchPart(p, at) {
    p.busy = true;
    return fetch(p.url, {headers: {"Accept": p.accept, "X-Cemctl-Moment": page + ":" + at},
                         cache: "no-store"}).then(function (r) {
      return r.text().then(function (t) { return {ok: r.ok, status: r.status, text: t}; });
    }).catch(function () { return {ok: false, status: 0, text: ""}; });
  }

  function show(p, res, at) {  // p.apply shows the answer and gives the period to ask again after (ms; 0: never)
    p.busy = false;
    p.period = p.apply(res);
    p.next = p.period ? at + p.period : Infinity;
  }

  function plan() {
    if (clock) clearTimeout(clock);
    var next = Infinity;
    parts.forEach(function (p) { if (!p.busy) next = Math.min(next, p.next); });
    clock = isFinite(next) ? setTimeout(tick, Math.max(0, next - Date.now())) : null;
  }

  function tick() {
    clock = null;
    if (document.hidden) { clock = setTimeout(tick, 2000); return; }
    var at = Date.now(), groups = {};
    parts.forEach(function (p) {
      if (!p.busy && p.next <= at + 1000) (groups[p.period] = groups[p.period] || []).push(p);
    });
    Object.keys(groups).forEach(function (k) {
      var group = groups[k];
      Promise.all(group.map(function (p) { return fetchPart(p, at); })).then(function (results) {
        results.forEach(function (res, i) { show(group[i], res, at); });
        updateCompareButtons();
        plan();
      });
    });
    plan();
  }

  function startClock() {  // every part at one moment, each shown as it comes (the live table again, with the others)
    var at = Date.now();
    parts.forEach(function (p) {
      fetchPart(p, at).then(function (res) { show(p, res, at); updateCompareButtons(); plan(); });
    });
  }

  function fragmentPart(el) {
    return {el: el, url: el.getAttribute("data-fragment"), accept: "text/html", apply: function (res) {
      if (!res.ok) {
        var msg = el.querySelector(".fragment-error") || el.appendChild(textEl("p", "fragment-error error", ""));
        msg.textContent = "could not refresh (" + (res.status ? "HTTP " + res.status : "no answer") + "); retrying";
        return 10000;
      }
      var picked = {};
      var boxes = el.querySelectorAll("input[type=checkbox]:checked");
      for (var i = 0; i < boxes.length; i++) picked[boxes[i].value] = true;
      el.innerHTML = res.text; // HTML rendered and escaped by the server's templates
      boxes = el.querySelectorAll("input[type=checkbox]");
      for (var j = 0; j < boxes.length; j++) if (picked[boxes[j].value]) boxes[j].checked = true;
      var inner = el.querySelector("[data-refresh-s]");
      var s = inner ? parseFloat(inner.getAttribute("data-refresh-s")) : 0;
      return s > 0 ? s * 1000 : 0;
    }};
  }

  // ------------------------------------------------------------------ charts (uPlot)
  var charts = [];

  function chartHeight() { return window.innerWidth < 600 ? 230 : 300; }

  // One number format per axis: the decimals (or the unit) that tell its ticks apart, the same for every tick
  // (never '80000' beside '100k').
  function axisFormat(values) {
    var vals = (values || []).filter(function (v) { return v !== null && v !== undefined && isFinite(v); });
    var big = vals.reduce(function (m, v) { return Math.max(m, Math.abs(v)); }, 0);
    if (big >= 1e18) return function (v) { return v.toExponential(1); };
    if (big >= 1e4) {
      var units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]], u = units[units.length - 1];
      for (var i = 0; i < units.length; i++) if (big >= units[i][0]) { u = units[i]; break; }
      var d = 0;
      while (d < 3 && new Set(vals.map(function (v) { return (v / u[0]).toFixed(d); })).size < new Set(vals).size) d++;
      return function (v) { return (v / u[0]).toFixed(d).replace(/\.0+$/, "") + (v === 0 ? "" : u[1]); };
    }
    var nonzero = vals.filter(function (v) { return v !== 0; });
    var small = nonzero.length ? Math.min.apply(null, nonzero.map(Math.abs)) : 1;
    if (small < 1e-3 && big < 1e-2) return function (v) { return v === 0 ? "0" : v.toExponential(1); };
    var dec = 0;
    while (dec < 6 && vals.some(function (v) { return Math.abs(+v.toFixed(dec) - v) > Math.abs(v) * 1e-9 + 1e-12; })) dec++;
    return function (v) { return v.toFixed(dec); };
  }

  // A log axis: a gridline and a label at 1, 2 and 5 times each power of ten (fewer when they crowd).
  function logSplits(min, max, room) {
    var out = [], steps = room < 140 ? [1] : room < 260 ? [1, 3] : [1, 2, 5];
    for (var e = Math.floor(Math.log10(min)) - 1; e <= Math.ceil(Math.log10(max)) + 1; e++) {
      steps.forEach(function (m) { var v = m * Math.pow(10, e); if (v >= min * 0.999 && v <= max * 1.001) out.push(+v.toPrecision(6)); });
    }
    return out;
  }

  function drawMarker(ctx, shape, x, y, r, color, hollow, outline) {
    ctx.beginPath();
    if (shape === "s") ctx.rect(x - r * 0.85, y - r * 0.85, r * 1.7, r * 1.7);
    else if (shape === "^") { ctx.moveTo(x, y - r * 1.1); ctx.lineTo(x + r, y + r * 0.8); ctx.lineTo(x - r, y + r * 0.8); ctx.closePath(); }
    else if (shape === "v") { ctx.moveTo(x, y + r * 1.1); ctx.lineTo(x + r, y - r * 0.8); ctx.lineTo(x - r, y - r * 0.8); ctx.closePath(); }
    else if (shape === "D") { ctx.moveTo(x, y - r * 1.15); ctx.lineTo(x + r, y); ctx.lineTo(x, y + r * 1.15); ctx.lineTo(x - r, y); ctx.closePath(); }
    else ctx.arc(x, y, r, 0, 2 * Math.PI);
    ctx.fillStyle = hollow ? "#ffffff" : color;
    ctx.fill();
    ctx.strokeStyle = outline ? "#222" : color;
    ctx.lineWidth = outline ? 0.8 : 1.5;
    ctx.stroke();
  }

  // A legend swatch that shows what the chart draws: the line with its dash pattern, the marker, hollow or not.
  function swatch(s) {
    var c = document.createElement("canvas"), dpr = window.devicePixelRatio || 1, w = 30, h = 12;
    c.width = w * dpr; c.height = h * dpr; c.className = "swatch";
    var ctx = c.getContext("2d");
    ctx.scale(dpr, dpr);
    if (s.lines !== false) {
      ctx.strokeStyle = s.color; ctx.lineWidth = 2;
      ctx.setLineDash(s.dash || []);
      ctx.beginPath(); ctx.moveTo(1, h / 2); ctx.lineTo(w - 1, h / 2); ctx.stroke();
      ctx.setLineDash([]);
    }
    if (s.points || s.lines === false) drawMarker(ctx, s.marker || "o", w / 2, h / 2, 3.6, s.color, false, s.outline);
    return c;
  }

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
    var bands = [], hidden = [], marks = [], shown = [];
    var lo = Infinity, hi = -Infinity;
    function track(arr) {
      for (var k = 0; k < arr.length; k++) {
        var v = arr[k];
        if (v !== null && isFinite(v) && (!c.log_y || v > 0)) { if (v < lo) lo = v; if (v > hi) hi = v; }
      }
    }
    // Lines a little translucent where there are several, so one drawn over another leaves it showing; hovering a
    // line or its legend entry fades the others (focus).
    var several = c.series.filter(function (s) { return s.lines !== false; }).length > 1;
    c.series.forEach(function (s) {
      var i = data.length;
      data.push(s.y);
      track(s.y);
      var opts = {label: s.label, stroke: several ? alpha(s.color, 0.75) : s.color, width: 1.6, spanGaps: true,
                  points: {show: false}};
      if (s.dash) opts.dash = s.dash;
      if (s.lines === false) opts.paths = function () { return null; };
      if (s.whiskers) {
        var slo = s.lo, shi = s.hi, sn = s.n, ssd = s.sd;
        opts.value = function (u, v, si, di) {  // mean ± s.d. (n): the whiskers' numbers
          if (v === null || v === undefined) return "–";
          var t = fmt(v);
          if (di !== null && di !== undefined && ssd && ssd[di] !== null && ssd[di] !== undefined) t += " ± " + fmt(ssd[di]);
          if (sn && di !== null && di !== undefined && sn[di]) t += " (n=" + sn[di] + ")";
          return t;
        };
        if (slo && shi) { track(slo); track(shi); }
      } else {
        opts.value = function (u, v) { return fmt(v); };
      }
      if (s.points || s.lines === false || s.whiskers) marks.push({i: i, s: s});
      series.push(opts);
      shown.push({i: i, s: s});
      if (s.lo && s.hi && !s.whiskers) {
        data.push(s.hi, s.lo);
        track(s.hi); track(s.lo);
        var band = {label: "", stroke: "transparent", width: 0, spanGaps: true, points: {show: false},
                    value: function () { return ""; }};
        series.push(Object.assign({}, band), Object.assign({}, band));
        bands.push({series: [i + 1, i + 2], fill: alpha(s.color, 0.16)});
        hidden.push(i + 1, i + 2);
      }
      if (s.legend === false) hidden.push(i);
    });
    var xs = c.x.filter(function (v) { return v !== null; });
    var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs);
    var logX = c.log_x && xs.length && xs.every(function (v) { return v > 0; });
    var xScale = {time: false};
    var ticks = c.ticks && c.ticks.length ? c.ticks : null;
    if (cats) {
      xScale.range = function () { return [-0.5, cats.length - 0.5]; };
    } else if (ticks) {  // a point chart: room at both ends for a whole marker and its whiskers
      var tmin = Math.min(xmin, Math.min.apply(null, ticks)), tmax = Math.max(xmax, Math.max.apply(null, ticks));
      if (logX) { xScale.distr = 3; var f = Math.pow(tmax / tmin, 0.06) || 1.3; xScale.range = function () { return [tmin / f, tmax * f]; }; }
      else { var pad = (tmax - tmin) * 0.06 || Math.abs(tmin) * 0.1 || 1; xScale.range = function () { return [tmin - pad, tmax + pad]; }; }
    } else if (logX) {
      xScale.distr = 3;
    }
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
    var integerX = !cats && xs.length && xs.every(function (v) { return Math.abs(v - Math.round(v)) < 1e-9; });
    var longCats = cats && (cats.length > 5 || cats.some(function (t) { return String(t).length > 10; }));
    var xAxis = {label: c.x_label, stroke: "#444", grid: {stroke: "#eee"}, ticks: {stroke: "#ddd"}};
    if (cats) {
      xAxis.splits = function () { return cats.map(function (_, k) { return k; }); };
      xAxis.values = function (u, splits) { return splits.map(function (v) { return cats[v] !== undefined ? cats[v] : ""; }); };
    } else if (ticks) {  // a tick at each value the arms have, labelled as the grid writes it
      var labels = c.tick_labels || ticks.map(fmt);
      xAxis.splits = function () { return ticks; };
      xAxis.filter = function (u, splits) { return splits; };  // every tick labelled (uPlot's log filter kept 2 of 11)
      xAxis.values = function (u, splits) { return splits.map(function (v) { var k = ticks.indexOf(v); return k >= 0 ? labels[k] : ""; }); };
      var longest = Math.max.apply(null, labels.map(function (t) { return String(t).length; }));
      if (labels.length * (longest * 7 + 12) > (box.clientWidth || 600) - 80) { xAxis.rotate = -30; xAxis.size = 64; }
    } else {
      if (logX) {
        xAxis.splits = function (u, ax, min, max) { return logSplits(min, max, u.bbox.width / devicePixelRatio); };
        xAxis.filter = function (u, splits) { return splits; };
      }
      else if (integerX) xAxis.incrs = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 2.5e4, 5e4,
                                       1e5, 2e5, 2.5e5, 5e5, 1e6, 2e6, 2.5e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9, 2e9, 5e9, 1e10];
      xAxis.values = function (u, splits) { var f = axisFormat(splits); return splits.map(function (v) { return v === null ? "" : f(v); }); };
      xAxis.space = 80;  // room for '1.25M' between two ticks
    }
    if (longCats) { xAxis.rotate = -28; xAxis.size = 80; }
    var yAxis = {label: c.y_label, stroke: "#444", grid: {stroke: "#eee"}, ticks: {stroke: "#ddd"},
                 size: function (u, values) {  // room for the longest tick value and the label beside it ('0.00205')
                   var n = 0;
                   (values || []).forEach(function (v) { n = Math.max(n, String(v === null || v === undefined ? "" : v).length); });
                   return Math.max(62, Math.round(n * 7 + 46));
                 },
                 values: function (u, splits) { var f = axisFormat(splits); return splits.map(function (v) { return v === null ? "" : f(v); }); }};
    if (yScale.distr === 3) {
      yAxis.splits = function (u, ax, min, max) { return logSplits(min, max, u.bbox.height / devicePixelRatio); };
      yAxis.filter = function (u, splits) { return splits; };
    }
    var opts = {
      width: Math.max(260, box.clientWidth || parent.clientWidth || 600),
      height: chartHeight(),
      scales: {x: xScale, y: yScale},
      axes: [xAxis, yAxis],
      series: series,
      bands: bands,
      cursor: {points: {size: 7}, focus: {prox: 16}},
      focus: {alpha: 0.15},
      legend: {live: true},
      hooks: {draw: [function (u) {  // whiskers (mean ± 1 s.d.) and markers: hollow for a single seed
        if (!marks.length) return;
        var ctx = u.ctx, dpr = devicePixelRatio;
        ctx.save();
        ctx.beginPath(); ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height); ctx.clip();
        marks.forEach(function (m) {
          if (!u.series[m.i].show) return;
          ctx.globalAlpha = u.series[m.i].alpha === undefined ? 1 : u.series[m.i].alpha;  // faded with its line
          var s = m.s, ys = u.data[m.i];
          for (var k = 0; k < u.data[0].length; k++) {
            if (ys[k] === null || ys[k] === undefined || u.data[0][k] === null) continue;
            var x = u.valToPos(u.data[0][k], "x", true), y = u.valToPos(ys[k], "y", true);
            if (s.whiskers && s.lo && s.hi && s.lo[k] !== null && s.hi[k] !== null) {
              var y1 = u.valToPos(s.lo[k], "y", true), y2 = u.valToPos(s.hi[k], "y", true), cap = 4 * dpr;
              ctx.strokeStyle = s.color; ctx.lineWidth = 1.3 * dpr;
              ctx.beginPath();
              ctx.moveTo(x, y1); ctx.lineTo(x, y2);
              ctx.moveTo(x - cap, y1); ctx.lineTo(x + cap, y1);
              ctx.moveTo(x - cap, y2); ctx.lineTo(x + cap, y2);
              ctx.stroke();
            }
            var hollow = s.whiskers && s.n && s.n[k] === 1;
            drawMarker(ctx, s.marker || "o", x, y, (s.whiskers ? 4.2 : 2.8) * dpr, s.color, hollow, s.outline);
          }
        });
        ctx.restore();
      }]}
    };
    var u = new uPlot(opts, data, box);
    var rows = u.root.querySelectorAll(".u-legend .u-series");
    hidden.forEach(function (k) { if (rows[k]) rows[k].style.display = "none"; });
    shown.forEach(function (e) {  // the swatch shows the dash and the marker (uPlot's is a plain square)
      var row = rows[e.i], marker = row && row.querySelector(".u-marker");
      if (marker) { marker.style.display = "none"; marker.parentNode.insertBefore(swatch(e.s), marker); }
    });
    (c.extra_legend || []).forEach(function (e) {
      var item = textEl("span", "extra-legend", " " + e.label);
      item.insertBefore(swatch({color: e.color, marker: e.marker, lines: false, outline: e.outline}), item.firstChild);
      box.appendChild(item);
    });
    charts.push({u: u, box: box});
  }

  function chartPart(el) {
    var last = null, first = true;
    el.textContent = "";
    el.appendChild(textEl("p", "chart-note", "loading…"));
    return {el: el, url: el.getAttribute("data-chart"), accept: "application/json", apply: function (res) {
      var j = {};
      try { j = JSON.parse(res.text); } catch (e) {
        j = {error: res.status ? "could not read the chart's data" : "could not load the chart (no answer)"};
      }
      var live = !!j.live, updated = j.updated;
      delete j.updated;
      var same = JSON.stringify(j) === last;
      last = JSON.stringify(j);
      if (!same || first) {
        charts = charts.filter(function (ch) { if (el.contains(ch.box)) { ch.u.destroy(); return false; } return true; });
        el.textContent = "";
        if (!res.ok || j.error) el.appendChild(textEl("p", "chart-error", j.error || "could not load the chart"));
        else if (!j.charts || !j.charts.length || !j.charts.some(function (c) { return c.series.length; })) {
          el.appendChild(textEl("p", "chart-note", j.note || "nothing to draw yet"));
        } else {
          j.charts.forEach(function (c) { if (c.series.length) drawChart(el, c); });
          if (j.note) el.appendChild(textEl("p", "chart-note", j.note));
        }
        el.appendChild(textEl("p", "chart-note updated", ""));
      }
      var stamp = el.querySelector(".updated");
      if (stamp && updated) stamp.textContent = "updated " + updated + (live ? " (redrawn while runs train)" : "");
      first = false;
      return (!res.ok || j.error ? 15 : j.refresh_s || 30) * 1000;  // a run's or a comparison's: every 30 s
    }};
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
      var left = 40, right = 64, top = 44, bottom = 20;
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
      var spacing = axes.length > 1 ? geo.xs[1] - geo.xs[0] : geo.w;
      axes.forEach(function (a, k) {
        var x = geo.xs[k];
        ctx.beginPath(); ctx.moveTo(x, yOf(1)); ctx.lineTo(x, yOf(0)); ctx.stroke();
        // titles never overprint: cut to twice the spacing and set on two rows when they would touch
        var title = a.label, room = Math.max(40, spacing * 2 - 8);
        while (title.length > 4 && ctx.measureText(title).width > room) title = title.slice(0, -2) + "…";
        var twoRows = axes.some(function (b) { return ctx.measureText(b.label).width > spacing - 6; });
        ctx.fillText(title, x, twoRows && k % 2 ? 30 : 14);
        ctx.font = "11px system-ui, sans-serif";
        var side = 1;  // values to the right of each axis (the last one's in the right margin): never two axes' apart
        ctx.textAlign = "left";
        var lastY = -1e9;
        function tick(text, y) {  // a value on an axis, left out where it would touch the one above
          if (Math.abs(y - lastY) < 12) return;
          lastY = y; label(text, x + side * 5, y + 4);
        }
        if (a.categorical) {
          a.categories.forEach(function (c, i) { var s = String(c); tick(s.length > 14 ? s.slice(0, 13) + "…" : s, yOf(norm(k, i))); });
        } else if (a.ticks && a.ticks.length) {  // a grid axis: the values its runs take (every one up to 12)
          a.ticks.forEach(function (v, i) { tick(a.tick_labels ? a.tick_labels[i] : fmt(v), yOf(norm(k, v))); });
        } else {
          var s = scales[k], n = 5;
          for (var i = 0; i <= n; i++) {
            var t = i / n, v = s.log ? Math.pow(10, s.min + t * (s.max - s.min)) : s.min + t * (s.max - s.min);
            tick(fmt(v), yOf(t));
          }
        }
        ctx.textAlign = "center";
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
    var log = document.getElementById("log");
    if (log) log.scrollTop = log.scrollHeight;  // a log opens at its end: the lines written last
    var i, els = document.querySelectorAll("[data-fragment]");
    for (i = 0; i < els.length; i++) parts.push(fragmentPart(els[i]));
    els = document.querySelectorAll("[data-chart]");
    for (i = 0; i < els.length; i++) parts.push(chartPart(els[i]));
    startClock();
    els = document.querySelectorAll("[data-parallel]");
    for (i = 0; i < els.length; i++) loadParallel(els[i]);
    updateCompareButtons();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
