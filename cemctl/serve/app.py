"""`cemctl serve`'s pages: a URL in, a response out (status, headers, body); no socket here (`server.py`).

    app = Dashboard(open_source(url, runs_root))
    resp = app.handle("GET", "/experiments/fig2c?where=attn_steps%3E%3D2&sort=-test_loss", host="127.0.0.1:8765")

Routes (GET and HEAD only; anything else is 405):
    /                                        experiments: counts by state, last activity, claims verdicts
    /experiments                             the experiments table alone (fragment; the index refreshes it)
    /experiments/NAME                        live runs table, arms table, metric and curve charts, claims, report
    /experiments/NAME/live                   the live runs table (an HTML fragment the page refreshes)
    /experiments/NAME/claims                 the experiment's claim parts (fragment)
    /experiments/NAME/metric.json            the metric chart's data;  /curves.json: the training curves'
    /experiments/NAME/parallel               parallel coordinates (/parallel.json: its data)
    /experiments/NAME/report/FILE            a file of the experiment's static report (only those its manifest lists)
    /runs/RUN_ID                             a run (/curves.json, /system.json: its charts' data)
    /compare?item=A&item=B[&experiment=E]    runs or arms side by side (/compare/curves.json)
    /static/FILE                             the packaged scripts and styles (no CDN)

Query parameters carry the selection, so a URL is a shareable view: `where` (repeatable, as `--where`
takes it), `sort` (as `--sort`: FIELD or -FIELD), `limit`, `scale`, and the charts' `metric`, `x`,
`hue`, `panel`, `logx`, `logy`, `cmetric`, `cx`. Bad input (a malformed `where`, an unknown field, a
path-like name, an oversized or repeated-too-often parameter) is a 4xx page with one line; an
unexpected error is a 500 page with one line (the traceback goes to the server's terminal only).
Every string is escaped by the templates (Jinja2 autoescape); data for the scripts is JSON with
`<`, `>`, `&` escaped, read as text by the scripts.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from cem_core.errors import CemError, ConfigError

MAX_URL_CHARS = 8192
MAX_VALUE_CHARS = 2000
MAX_PARAMS = 64
MAX_REPEATS = 32
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")  # cem_core.names.EXPERIMENT_NAME_RE
FILE_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]{0,199}$")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# A file of the static report (its index.html, an SVG figure) is a document cemctl wrote, with the inline styles
# matplotlib and the report write: those may apply; nothing in it may run, load from elsewhere or frame it.
REPORT_CSP = ("default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; base-uri 'none'; "
              "form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
                    "Referrer-Policy": "no-referrer", "Cross-Origin-Resource-Policy": "same-origin"}
PARAMS = {"where", "sort", "limit", "scale", "metric", "x", "hue", "panel", "logx", "logy", "asort", "cmetric", "cx",
          "clogx", "clogy", "item", "experiment", "lines", "rates", "smooth"}


class HttpError(Exception):
    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)

    def all_headers(self) -> dict[str, str]:
        out = {"Content-Type": self.content_type, "Content-Length": str(len(self.body)),
               "Cache-Control": "no-store", **SECURITY_HEADERS}
        out.update(self.headers)
        return out


REASONS = {400: "Bad request", 404: "Not found", 405: "Method not allowed", 414: "URL too long",
           421: "Misdirected request", 500: "Internal error", 503: "Database unavailable"}


@dataclass
class Request:
    path: str
    params: dict[str, list[str]]
    moment: str = ""  # the page's clock tick that asked (X-Cemctl-Moment): its parts show one read of the folders

    def one(self, name: str, default: str = "") -> str:
        values = self.params.get(name) or []
        if len(values) > 1:
            raise HttpError(400, f"{name}: given {len(values)} times; give it once")
        return values[0] if values else default

    def many(self, name: str) -> list[str]:
        return [v for v in self.params.get(name) or [] if v.strip()]

    def flag(self, name: str) -> bool:
        v = self.one(name).lower()
        if v in ("", "0", "false", "no", "off"):
            return False
        if v in ("1", "true", "yes", "on"):
            return True
        raise HttpError(400, f"{name}: {v!r} is not a yes/no value (allowed: 1, 0, true, false, on, off)")

    def maybe(self, name: str) -> bool | None:
        """A yes/no value, None when not given (the default the page says)."""
        return self.flag(name) if self.one(name).strip() else None

    def number(self, name: str, default: int, low: int, high: int) -> int:
        text = self.one(name)
        if not text:
            return default
        if not text.isdigit() or not (low <= int(text) <= high):
            raise HttpError(400, f"{name}: {text[:40]!r} is not a whole number from {low} to {high}")
        return int(text)

    def query(self, **changes: Any) -> str:
        """This request's query string with some parameters replaced (None: removed), for links."""
        params = {k: list(v) for k, v in self.params.items()}
        for k, v in changes.items():
            if v is None or v == [] or v == "":
                params.pop(k, None)
            else:
                params[k] = [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]
        pairs = [(k, x) for k, vs in params.items() for x in vs]
        return ("?" + urlencode(pairs)) if pairs else ""


def parse_request(target: str) -> Request:
    """The path (percent-decoded, checked segment by segment later) and the query parameters, within limits."""
    if len(target) > MAX_URL_CHARS:
        raise HttpError(414, f"the URL has {len(target)} characters; at most {MAX_URL_CHARS} are read")
    parts = urlsplit(target)
    try:
        pairs = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_PARAMS)
    except ValueError:
        raise HttpError(400, f"more than {MAX_PARAMS} query parameters") from None
    for name, values in pairs.items():
        if len(values) > MAX_REPEATS:
            raise HttpError(400, f"{name[:40]}: given {len(values)} times (at most {MAX_REPEATS})")
        for v in values:
            if len(v) > MAX_VALUE_CHARS:
                raise HttpError(400, f"{name[:40]}: a value of {len(v)} characters (at most {MAX_VALUE_CHARS})")
            if "\x00" in v:
                raise HttpError(400, f"{name[:40]}: a value with a NUL character")
    return Request(parts.path or "/", {k: v for k, v in pairs.items() if k in PARAMS})


def segments(path: str) -> list[str]:
    """The path's segments, each percent-decoded once; an empty, dot or slash-bearing segment is refused."""
    raw = path.split("/")[1:]
    if raw and raw[-1] == "":
        raw = raw[:-1]
    out = []
    for seg in raw:
        try:
            text = unquote(seg, errors="strict") if "%" in seg else seg
        except UnicodeDecodeError:
            raise HttpError(404, "no such page (a path that is not percent-encoded UTF-8)") from None
        if not text or text in (".", "..") or "/" in text or "\\" in text or "\x00" in text:
            raise HttpError(404, "no such page (a path with an empty, '.' or '..' part)")
        out.append(text)
    return out


def name_of(text: str, what: str = "experiment") -> str:
    if not NAME_RE.match(text):
        raise HttpError(404, f"{what}: {text[:80]!r} is not a valid name")
    return text


def json_text(obj: Any) -> str:
    """JSON safe inside HTML: `<`, `>`, `&` and quotes escaped; NaN and infinities as null."""
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    text = json.dumps(clean(obj), ensure_ascii=True, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")


class Dashboard:
    """The pages of one source (`cemctl.services.dashboard.Source`)."""

    def __init__(self, src: Any, *, loopback: bool = True, log: Callable[[str], None] | None = None) -> None:
        self.src = src
        self.loopback = loopback
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.started = time.time()

    # ------------------------------------------------------------------ plumbing
    @cached_property
    def env(self) -> Any:
        import jinja2

        env = jinja2.Environment(loader=jinja2.PackageLoader("cemctl.serve", "templates"), autoescape=True,
                                 undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        env.filters["when"] = _when
        env.filters["ago"] = _ago
        env.filters["duration"] = _duration
        env.filters["q"] = lambda s: quote(str(s), safe="")
        env.filters["jsontext"] = json_text
        return env

    @cached_property
    def static(self) -> dict[str, tuple[bytes, str]]:
        from importlib.resources import files

        folder = files("cemctl.serve") / "static"
        out = {}
        for item in folder.iterdir():
            suffix = "." + item.name.rsplit(".", 1)[-1] if "." in item.name else ""
            if suffix in STATIC_TYPES and item.is_file():
                out[item.name] = (item.read_bytes(), STATIC_TYPES[suffix])
        return out

    def render(self, template: str, code: int = 200, **ctx: Any) -> Response:
        html = self.env.get_template(template).render(**ctx)
        return Response(code, html.encode())

    def json(self, obj: Any, status: int = 200) -> Response:
        return Response(status, json_text(obj).encode(), "application/json; charset=utf-8")

    def handle(self, method: str, target: str, host: str | None = None, moment: str | None = None) -> Response:
        """The response to one request (never raises; HEAD gets GET's headers without a body); `moment`: the
        X-Cemctl-Moment header of a page's refresh (`Request.moment`)."""
        wants_json = False
        try:
            if method not in ("GET", "HEAD"):
                raise HttpError(405, f"{method[:20]} is not allowed: this dashboard only reads (GET, HEAD)",
                                headers={"Allow": "GET, HEAD"})
            if self.loopback and host is not None and not _loopback_host(host):
                raise HttpError(421, f"host {host[:80]!r} is not this server's (it listens on the loopback "
                                     "interface only; use http://127.0.0.1:PORT/)")
            req = parse_request(target)
            req.moment = (moment or "")[:64]
            wants_json = req.path.endswith(".json")
            resp = self.route(req)
        except HttpError as e:
            resp = self.error(e.status, e.message, wants_json)
            resp.headers.update(e.headers)
        except Exception as e:  # noqa: BLE001 - every error is a page, never a traceback in the browser
            resp = self.failure(e, wants_json, target)
        if method == "HEAD":
            resp = Response(resp.status, b"", resp.content_type,
                            {**resp.headers, "Content-Length": str(len(resp.body))})
        return resp

    def failure(self, e: Exception, wants_json: bool, target: str) -> Response:
        from cemctl.db.engine import DatabaseError
        from cemctl.services.dashboard import NotFound

        if isinstance(e, NotFound):
            return self.error(404, str(e), wants_json)
        if isinstance(e, DatabaseError):
            return self.error(503, str(e), wants_json)
        if isinstance(e, (ConfigError, CemError)):
            return self.error(400, str(e), wants_json)
        self.log(f"cemctl serve: internal error on {target[:200]}:\n" + "".join(
            traceback.format_exception(type(e), e, e.__traceback__)))
        return self.error(500, f"internal error ({type(e).__name__}); the details are in the terminal running "
                               "cemctl serve", wants_json)

    def error(self, status: int, message: str, as_json: bool = False) -> Response:
        from cem_core.names import printable

        message = printable(" ".join(str(message).split()))
        if as_json:
            return self.json({"error": message}, status)
        try:
            return self.render("error.html", status, status=status, reason=REASONS.get(status, "Error"),
                               message=message, title=f"{status} {REASONS.get(status, 'Error')}",
                               db=_shown_url(self.src.url), runs_root=str(self.src.runs_root))
        except Exception:  # noqa: BLE001 - a broken template still gives an escaped page
            import html

            return Response(status, f"<!doctype html><title>{status}</title><p>{html.escape(message)}</p>".encode())

    # ------------------------------------------------------------------ routes
    def route(self, req: Request) -> Response:
        seg = segments(req.path)
        if seg[:1] == ["static"] and len(seg) == 2 and seg[1] in self.static:
            body, ctype = self.static[seg[1]]
            return Response(200, body, ctype, {"Cache-Control": "max-age=3600"})
        self.src.check()  # a deleted database: 503; a replaced one: read anew
        if not seg:
            return self.index(req)
        if seg == ["claims"]:
            return self.all_claims(req)
        head, rest = seg[0], seg[1:]
        if seg == ["experiments"]:
            return self.index(req, "overview.html")
        if head == "experiments" and rest:
            name = name_of(rest[0])
            sub = rest[1:]
            if not sub:
                return self.experiment(req, name)
            if sub[0] == "report" and len(sub) >= 2:
                return self.report_file(name, sub[1:])
            if len(sub) == 1:
                page = {"live": self.live, "arms": self.arms, "claims": self.claims, "metric.json": self.metric_json,
                        "curves.json": self.curves_json, "parallel": self.parallel,
                        "parallel.json": self.parallel_json}.get(sub[0])
                if page is not None:
                    return page(req, name)
        if head == "runs" and rest and len(rest) <= 2:
            rid = rest[0]
            if len(rest) == 1:
                return self.run(req, rid)
            run_page = {"curves.json": self.run_curves_json, "system.json": self.system_json}.get(rest[1])
            if run_page is not None:
                return run_page(req, rid)
        if head == "compare" and len(rest) <= 1:
            if not rest:
                return self.compare(req)
            if rest[0] == "curves.json":
                return self.compare_curves_json(req)
        raise HttpError(404, "no such page")

    # ------------------------------------------------------------------ helpers
    def selection(self, req: Request) -> Any:
        from cemctl.services.dashboard import Selection
        from cemctl.services.dashboard.tables import ROW_LIMIT

        sel = Selection(where=req.many("where"), sort=req.one("sort").strip(),
                        limit=req.number("limit", ROW_LIMIT, 0, 1_000_000), scale=req.one("scale") or None)
        sel.conds()  # a malformed condition or an unknown field: 400 with the allowed forms
        sel.order()
        return sel

    def base(self, req: Request, **ctx: Any) -> dict[str, Any]:
        return {"req": req, "db": _shown_url(self.src.url), "runs_root": str(self.src.runs_root),
                "now_text": time.strftime("%H:%M:%S"), "interval_svg": interval_svg, **ctx}

    # ------------------------------------------------------------------ pages
    def index(self, req: Request, template: str = "index.html") -> Response:
        """The experiments page, or (`overview.html`, /experiments) its table alone, which the page asks for again."""
        from cemctl.services.dashboard.tables import experiments_overview, refresh_s

        rows = experiments_overview(self.src)
        return self.render(template, **self.base(req, title="Experiments", rows=rows,
                                                 refresh_s=refresh_s(s for r in rows for s in r.counts)))

    def all_claims(self, req: Request) -> Response:
        from cemctl.services.dashboard.tables import claim_verdicts, claims_by_experiment

        rows = claim_verdicts(self.src)
        return self.render("claims_summary.html", **self.base(req, rows=rows, by_exp=claims_by_experiment(self.src)))

    def experiment(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard import tables as T
        from cemctl.services.dashboard.charts import CURVE_METRICS, CURVE_X, chart_options

        problem = ""
        try:
            sel = self.selection(req)
        except (HttpError, CemError) as e:  # a malformed where or sort: the page stays, the filter box keeps the text
            if isinstance(e, HttpError) and e.status != 400:
                raise
            problem = e.message if isinstance(e, HttpError) else str(e)
            req_shown, req = req, Request(req.path, {k: v for k, v in req.params.items() if k not in ("where", "sort")})
            sel = self.selection(req)
        else:
            req_shown = req
        for flag in ("logx", "logy", "clogx", "clogy"):
            req.flag(flag)
        if req.one("asort"):
            from cemctl.records.fields import resolve

            resolve(req.one("asort").strip().lstrip("-"), what="arms sort")
        recs = T.experiment_records(self.src, name, sel.scale)
        meta = recs.experiments.get(name)
        table = T.runs_table(self.src, name, sel)
        opts = self.memo(("options", name, sel), lambda: chart_options(self.src, name, sel))
        metric = req.one("metric") or opts["metric"]
        if metric not in opts["metrics"]:
            raise HttpError(400, f"metric: {metric!r} is not one of {', '.join(opts['metrics'])}")
        scales = sorted({r.get("scale") or "" for r in recs.records} - {""})
        chart_q = req.query(limit=None, sort=None, asort=None)
        from cemctl.services.dashboard.charts import RATES, SMOOTHING

        for key, allowed in (("rates", RATES), ("smooth", tuple(SMOOTHING))):
            if req.one(key) and req.one(key) not in allowed:
                raise HttpError(400, f"{key}: {req.one(key)[:40]!r} is not one of {', '.join(allowed)}")
        req.maybe("logx")
        return self.render("experiment.html", 400 if problem else 200, **self.base(
            req, title=name, name=name, meta=meta, table=table, opts=opts, metric=metric, scales=scales,
            sel=sel, report=T.report_files(self.src, name), base_path=f"/experiments/{quote(name, safe='')}",
            curve_metrics=CURVE_METRICS, curve_xs=CURVE_X, chart_q=chart_q, hue=req.many("hue"), problem=problem,
            req_shown=req_shown))

    def live(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard.tables import runs_table

        table = runs_table(self.src, name, self.selection(req), moment=req.moment)
        return self.render("live.html", **self.base(req, name=name, table=table,
                                                    base_path=f"/experiments/{quote(name, safe='')}"))

    def arms(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard import tables as T
        from cemctl.services.dashboard.charts import chart_options

        sel = self.selection(req)
        opts = self.memo(("options", name, sel), lambda: chart_options(self.src, name, sel))
        metric = req.one("metric") or opts["metric"]
        if metric not in opts["metrics"]:
            raise HttpError(400, f"metric: {metric!r} is not one of {', '.join(opts['metrics'])}")
        asort = req.one("asort").strip()
        compute = lambda: T.arms_table(self.src, name, sel, metric, asort, moment=req.moment)  # noqa: E731
        arms = compute() if self.in_flight(name, sel, req.moment) else self.memo(("arms", name, sel, metric, asort), compute)
        return self.render("arms.html", **self.base(req, name=name, arms=arms, metric=metric,
                                                    base_path=f"/experiments/{quote(name, safe='')}"))

    def claims(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard.tables import IDLE_REFRESH_S, claim_parts

        return self.render("claims.html", **self.base(req, name=name, parts=claim_parts(self.src, name),
                                                      refresh_s=IDLE_REFRESH_S))

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """`compute()` once per state of the database (the source's cache), keyed by what the page asked for."""
        return self.src.cached(repr(key), compute)

    def metric_json(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard.charts import metric_chart

        sel = self.selection(req)
        args: dict[str, Any] = dict(metric=req.one("metric") or None, x=req.one("x") or None,
                    hue=[h for v in req.many("hue") for h in v.split(",")], panel=req.one("panel") or None,
                    log_x=req.maybe("logx"), log_y=req.flag("logy"), rates=req.one("rates") or None)
        return self.json(self.live_memo(("metric", name, sel, sorted(args.items())), name, sel, req.moment,
                                        lambda: metric_chart(self.src, name, sel, moment=req.moment, **args)))

    def curves_json(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard.charts import experiment_curves

        sel = self.selection(req)
        args: dict[str, Any] = dict(metric=req.one("cmetric") or "train_loss", x=req.one("cx") or "tokens",
                    chart_x=req.one("x") or None, hue=[h for v in req.many("hue") for h in v.split(",")],
                    panel=req.one("panel") or None, rates=req.one("rates") or None, log_x=req.flag("clogx"),
                    log_y=req.flag("clogy"), smooth=req.one("smooth") or None)
        return self.json(self.live_memo(("curves", name, sel, sorted(args.items())), name, sel, req.moment,
                                        lambda: experiment_curves(self.src, name, sel, moment=req.moment, **args)))

    def in_flight(self, name: str, sel: Any, moment: str = "") -> bool:
        """Whether a run of the experiment is queued or running as its folder shows it now (or the database does)."""
        from cemctl.records.live import LIVE_STATES
        from cemctl.services.dashboard.tables import IN_FLIGHT, live_experiment

        recs, live = live_experiment(self.src, name, sel.scale, moment=moment)
        return any(r["state"] in IN_FLIGHT for r in live) or any(a["state"] != b["state"] for a, b in
                                                                 zip(recs.records, live) if a["state"] in LIVE_STATES)

    def live_memo(self, key: tuple, name: str, sel: Any, moment: str, compute: Callable[[], Any]) -> Any:
        """`memo` for what runs in flight change: computed anew while some run of the experiment is queued or
        running, or has ended in its folder before the database learnt it, else once per state of the database;
        with the period the page asks again after (the live tables' periods)."""
        from cemctl.services.dashboard.tables import IDLE_REFRESH_S, LIVE_REFRESH_S

        live = self.in_flight(name, sel, moment)
        return {**(compute() if live else self.memo(key, compute)), "updated": time.strftime("%H:%M:%S"),
                "live": live, "refresh_s": LIVE_REFRESH_S if live else IDLE_REFRESH_S}

    def parallel(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard.charts import chart_options

        sel = self.selection(req)
        opts = chart_options(self.src, name, sel)
        metric = req.one("metric") or opts["metric"]
        if metric not in opts["metrics"]:
            raise HttpError(400, f"metric: {metric!r} is not one of {', '.join(opts['metrics'])}")
        return self.render("parallel.html", **self.base(req, title=f"{name}: parallel coordinates", name=name,
                                                         opts=opts, metric=metric, sel=sel))

    def parallel_json(self, req: Request, name: str) -> Response:
        from cemctl.services.dashboard.charts import parallel

        sel = self.selection(req)
        metric = req.one("metric") or None
        return self.json(self.memo(("parallel", name, sel, metric), lambda: parallel(self.src, name, sel, metric=metric)))

    def report_file(self, name: str, parts: list[str]) -> Response:
        from cemctl.services.dashboard.tables import report_file

        if any(not FILE_PART_RE.match(p) for p in parts):
            raise HttpError(404, "no such report file")
        body, ctype = report_file(self.src, name, "/".join(parts))
        return Response(200, body, ctype, {"Content-Disposition": "inline", "Content-Security-Policy": REPORT_CSP})

    def run(self, req: Request, rid: str) -> Response:
        from cemctl.services.dashboard.charts import CURVE_X
        from cemctl.services.dashboard.tables import run_view

        view = run_view(self.src, rid, log_lines=req.number("lines", 200, 1, 5000))
        return self.render("run.html", **self.base(req, title=f"run {rid}", view=view, rid=rid, curve_xs=CURVE_X))

    def run_curves_json(self, req: Request, rid: str) -> Response:
        from cem_core.names import is_run_id
        from cemctl.services.dashboard.charts import run_curves

        if not is_run_id(rid):
            raise HttpError(404, f"run: {rid[:40]!r} is not a run id")
        return self.json(run_curves(self.src, rid, x=req.one("cx") or "step", log_y=req.flag("clogy")))

    def system_json(self, req: Request, rid: str) -> Response:
        from cem_core.names import is_run_id
        from cemctl.services.dashboard.charts import system_charts

        if not is_run_id(rid):
            raise HttpError(404, f"run: {rid[:40]!r} is not a run id")
        return self.json(system_charts(self.src, rid))

    def compare_args(self, req: Request) -> tuple[list[str], str | None, list[str]]:
        items = req.many("item")
        experiment = req.one("experiment") or None
        if experiment is not None:
            name_of(experiment)
        return items, experiment, req.many("where")

    def compare(self, req: Request) -> Response:
        from cemctl.services.dashboard.charts import CURVE_METRICS, CURVE_X
        from cemctl.services.dashboard.tables import compare_view

        items, experiment, where = self.compare_args(req)
        view = None
        if len(items) >= 2:
            view = compare_view(self.src, items, experiment=experiment, where=where)
        return self.render("compare.html", **self.base(req, title="Compare", view=view, items=items,
                                                       experiment=experiment, curve_metrics=CURVE_METRICS,
                                                       curve_xs=CURVE_X))

    def compare_curves_json(self, req: Request) -> Response:
        from cemctl.services.dashboard.charts import compare_curves

        items, experiment, where = self.compare_args(req)
        if len(items) < 2:
            raise HttpError(400, "compare: give at least two items (item=RUN_OR_ARM&item=...)")
        return self.json(compare_curves(self.src, items, experiment=experiment, where=where,
                                        metric=req.one("cmetric") or "train_loss", x=req.one("cx") or "tokens",
                                        log_x=req.flag("clogx"), log_y=req.flag("clogy"),
                                        smooth=req.one("smooth") or None))


def interval_svg(part: Any, width: int = 160, height: int = 14) -> str:
    """A claim part's 95% interval against 0 and its margin, as a small SVG made of numbers only (no text)."""
    vals = [v for v in (part.low, part.high, part.value, part.margin, -part.margin) if math.isfinite(v)]
    if not math.isfinite(part.value):
        return ""
    span = max(abs(v) for v in vals) * 1.15 or 1.0

    def x(v: float) -> float:
        return round(width / 2 + v / span * (width / 2 - 4), 1) if math.isfinite(v) else (width - 2 if v > 0 else 2)

    colour = {"holds": "#2ca02c", "contradicted": "#d62728"}.get(part.verdict, "#7f7f7f")
    out = [f'<svg class="ci" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    if math.isfinite(part.margin) and part.margin > 0:
        out.append(f'<rect x="{x(-part.margin)}" y="1" width="{x(part.margin) - x(-part.margin)}" height="{height - 2}" '
                   'fill="#e4e4e4"/>')
    out.append(f'<line x1="{width / 2}" y1="0" x2="{width / 2}" y2="{height}" stroke="#555" stroke-width="1"/>')
    if math.isfinite(part.low) or math.isfinite(part.high):
        out.append(f'<line x1="{x(part.low)}" y1="{height / 2}" x2="{x(part.high)}" y2="{height / 2}" '
                   f'stroke="{colour}" stroke-width="3"/>')
    out.append(f'<circle cx="{x(part.value)}" cy="{height / 2}" r="3" fill="{colour}"/></svg>')
    return "".join(out)


def _loopback_host(host: str) -> bool:
    name = host.strip().lower()
    if name.startswith("["):
        name = name[: name.find("]") + 1] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name in LOOPBACK_HOSTS


def _shown_url(url: str) -> str:
    """The database as a reader knows it: a SQLite file's path, else the URL without its password."""
    from cemctl.db.engine import shown_url

    return shown_url(url, unknown="(database)")


def _when(t: Any) -> str:
    from cemctl.records.formats import timestamp

    return timestamp(t) if isinstance(t, (int, float)) else ""


def _duration(seconds: Any) -> str:
    """'45s', '2m08s', '3h05m': as the command line writes a duration (`cemctl.records.formats.duration`)."""
    from cemctl.records.formats import duration

    return duration(seconds)


def _ago(t: Any, now: float | None = None) -> str:
    from cemctl.records.formats import duration

    if not isinstance(t, (int, float)):
        return ""
    return duration(max(0.0, (now or time.time()) - t)) + " ago"
