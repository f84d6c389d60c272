"""The console's HTML, rendered on the server from the page's facts (no script, no
build step). Every value that came from a user, a policy or a request passes through
`_e` (HTML escaping) on its way into the page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any, Protocol

from gateway.metering.ledger_record import LedgerRecord

# the page allows no script at all, and forms may only post back to the gateway
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    # a page may carry a key shown once: never cached
    "cache-control": "no-store",
}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:16px;align-items:center}
header h1{font-size:16px;margin:0;flex:1}
header form{margin:0}
main{padding:16px 20px;display:grid;gap:16px;
grid-template-columns:repeat(auto-fit,minmax(520px,1fr))}
section{background:#fff;border-radius:6px;padding:12px 16px;box-shadow:0 1px 2px #0002}
section.wide{grid-column:1/-1}
h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:3px 6px;border-bottom:1px solid #e4e6ea;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{background:#4c78d6;height:12px;display:inline-block;min-width:1px}
.status-revoked{color:#a33}.status-rotating{color:#b70}
.open{color:#a33;font-weight:600}.half_open{color:#b70}.closed{color:#2a7}
.notice{background:#e8f4e8;border:1px solid #9c9;padding:8px 12px;border-radius:4px}
.problem{background:#fbeaea;border:1px solid #d99;padding:8px 12px;border-radius:4px}
.key{font-family:monospace;font-size:14px;background:#fff;padding:2px 6px;user-select:all}
form.inline{display:inline}
label{display:inline-block;margin:2px 8px 2px 0}
input{font:inherit;padding:2px 4px}
nav a{margin-right:8px}
.muted{color:#667}
"""


# the spend ranges the page offers, in days
RANGES = {"1d": 1, "7d": 7, "30d": 30}


class RefusedRequest(Protocol):
    """A 4xx/5xx answer as the console lists it (observability's refusals ring holds them;
    this room may not import observability, so it names only what it shows)."""

    @property
    def time(self) -> float: ...
    @property
    def request_id(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def code(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def key_id(self) -> str: ...
    @property
    def route(self) -> str: ...


@dataclass(frozen=True)
class ConsolePage:
    range_name: str
    # (day, cost) oldest first; (name, cost, requests) per tenant, key, model
    spend_by_day: list[tuple[str, str, int]]
    spend_by: dict[str, list[tuple[str, str, int]]]
    tenants: list[dict[str, Any]]
    keys: list[dict[str, Any]]
    recent: list[LedgerRecord]
    breakers: dict[str, str]
    # a key created by this page's form, shown once
    new_key: dict[str, Any] | None = None
    notice: str = ""
    problems: list[str] = field(default_factory=list)
    # the newest 4xx/5xx answers of this process (no spend: not in the ledger)
    refusals: Sequence[RefusedRequest] = ()


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _document(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def login_page(problem: str = "") -> str:
    shown = f'<p class="problem" id="problem">{_e(problem)}</p>' if problem else ""
    return _document(
        "gateway console: log in",
        "<header><h1>gateway console</h1></header><main><section>"
        "<h2>Log in</h2>"
        f"{shown}"
        '<form method="post" action="/console/login">'
        '<label>Admin key <input type="password" name="admin_key" id="admin_key" '
        'autocomplete="current-password" required></label>'
        '<button type="submit" id="login">Log in</button></form>'
        '<p class="muted">The key whose hash is <code>server.admin_key_hash</code>. '
        "It is sent in this form only; the browser keeps a session cookie.</p>"
        "</section></main>",
    )


def console_html(page: ConsolePage) -> str:
    parts = [
        '<header><h1>gateway console</h1><nav><a href="/console/quality" id="quality-link"'
        ' style="color:#fff">Quality</a></nav>'
        '<form method="post" action="/console/logout"><button id="logout">Log out</button>'
        "</form></header><main>"
    ]
    if page.notice:
        parts.append(f'<section class="wide"><p class="notice" id="notice">{_e(page.notice)}</p>')
        if page.new_key is not None:
            parts.append(
                f"<p>Key <b>{_e(page.new_key['id'])}</b> for tenant "
                f"<b>{_e(page.new_key['tenant'])}</b>: "
                f'<span class="key" id="new-key">{_e(page.new_key["key"])}</span></p>'
                "<p>It is shown this once: copy it now. The gateway keeps only its hash.</p>"
            )
        parts.append("</section>")
    for problem in page.problems:
        parts.append(f'<section class="wide"><p class="problem">{_e(problem)}</p></section>')
    parts.append(_spend(page))
    parts.append(_breakers(page.breakers))
    parts.append(_recent(page))
    parts.append(_refusals(page))
    parts.append(_keys(page))
    parts.append(_forms(page))
    parts.append("</main>")
    return _document("gateway console", "".join(parts))


@dataclass(frozen=True)
class RouteQuality:
    """One route on the Quality page: its headline ("saved $X against always-<reference>
    at measured quality Y% [lo, hi]", or unmeasured) and its rows per served model and
    request kind (gateway.evaluation.quality.QualityRow.as_json())."""

    route: str
    headline: str
    measured: bool
    rows: list[dict[str, object]] = field(default_factory=list)


@dataclass(frozen=True)
class QualityPage:
    routes: list[RouteQuality]
    problems: list[str] = field(default_factory=list)


def quality_html(page: QualityPage) -> str:
    """Measured quality per route: the headline first (what it saved, at what measured
    quality), then each served model and request kind with its interval."""
    parts = [
        '<header><h1>gateway console: quality</h1><nav><a href="/console" style="color:#fff">'
        "Spend and keys</a></nav></header><main>"
    ]
    for problem in page.problems:
        parts.append(f'<section class="wide"><p class="problem">{_e(problem)}</p></section>')
    if not page.routes:
        parts.append(
            '<section class="wide"><h2>unmeasured</h2><p>No route has <code>evaluation:</code>'
            " and no labels are stored (docs/evaluation.md).</p></section>"
        )
    for route in page.routes:
        rows = "".join(
            f"<tr><td>{_e(r['model'])}</td><td>{_e(r['kind'])}</td>"
            f'<td class="n">{_ratio(r["ratio"])}</td>'
            f'<td class="n">[{_ratio(r["low"])}, {_ratio(r["high"])}]</td>'
            f'<td class="n">{_e(r["samples"])}</td>'
            f'<td class="n">{_money(str(r["evaluation_usd"]))}</td>'
            f'<td class="n">{_money(str(r["estimated_saved_usd"]))}</td></tr>'
            for r in route.rows
        )
        table = (
            "<table><tr><th>served model</th><th>kind</th><th class=n>quality ratio</th>"
            "<th class=n>95% interval</th><th class=n>judged</th><th class=n>evaluation $</th>"
            f"<th class=n>saved $ (est.)</th></tr>{rows}</table>"
            if route.rows
            else ""
        )
        parts.append(
            f'<section class="wide" id="route-{_e(route.route)}"><h2>{_e(route.route)}</h2>'
            f'<p class="headline"><b>{_e(route.headline)}</b></p>{table}'
            '<p class="muted">Quality ratio: the served answers\' judged quality over the'
            " reference model's on the same requests (1.0 = as good); judged pairwise, both"
            " orders; kinds are heuristic. Saved: each label weighted by 1 / sample rate.</p>"
            "</section>"
        )
    parts.append("</main>")
    return _document("gateway console: quality", "".join(parts))


def _ratio(value: object) -> str:
    return "inf" if value is None else f"{float(str(value)):.0%}"


def _spend(page: ConsolePage) -> str:
    ranges = " ".join(
        f'<a href="/console?range={name}">{_bold(name) if name == page.range_name else name}</a>'
        for name in RANGES
    )
    top = max((float(cost) for _, cost, _ in page.spend_by_day), default=0.0)
    days = (
        "".join(
            f"<tr><td>{_e(day)}</td><td class=n>${_money(cost)}</td><td class=n>{requests}</td>"
            f'<td><span class="bar" style="width:{_width(cost, top)}px"></span></td></tr>'
            for day, cost, requests in page.spend_by_day
        )
        or '<tr><td colspan=4 class="muted">no requests in this range</td></tr>'
    )
    out = [
        '<section class="wide" id="spend"><h2>Spend</h2>'
        f"<nav>range: {ranges}</nav>"
        '<table id="spend-by-day"><tr><th>day (UTC)</th><th class=n>cost</th>'
        f"<th class=n>requests</th><th></th></tr>{days}</table>"
        '<div style="display:flex;gap:16px;flex-wrap:wrap;margin-top:8px">'
    ]
    for group in ("tenant", "key", "model"):
        rows = (
            "".join(
                f"<tr><td>{_e(name)}</td><td class=n>${_money(cost)}</td><td class=n>{n}</td></tr>"
                for name, cost, n in page.spend_by.get(group, [])[:15]
            )
            or '<tr><td colspan=3 class="muted">none</td></tr>'
        )
        out.append(
            f'<table id="spend-by-{group}" style="width:auto;min-width:240px">'
            f"<tr><th>{group}</th><th class=n>cost</th><th class=n>requests</th></tr>"
            f"{rows}</table>"
        )
    out.append("</div></section>")
    return "".join(out)


def _breakers(states: dict[str, str]) -> str:
    rows = (
        "".join(
            f'<tr><td>{_e(name)}</td><td class="{_e(state)}">{_e(state)}</td></tr>'
            for name, state in states.items()
        )
        or '<tr><td colspan=2 class="muted">no deployment has been called yet</td></tr>'
    )
    return (
        '<section id="breakers"><h2>Breakers</h2>'
        "<table><tr><th>deployment</th><th>state</th></tr>"
        f"{rows}</table></section>"
    )


def _recent(page: ConsolePage) -> str:
    rows = (
        "".join(
            "<tr>"
            f"<td>{_e(_time(r.time))}</td><td>{_e(r.tenant)}</td><td>{_e(r.key_id)}</td>"
            f"<td>{_e(r.route)}</td><td>{_e(r.model)}{_changed(r.changed)}</td>"
            f"<td class=n>{r.status}</td>"
            f"<td class=n>${_money(r.cost_usd)}</td><td class=n>{r.latency_ms:.0f} ms</td>"
            f'<td class="muted">{_e(r.request_id)}</td>'
            "</tr>"
            for r in page.recent
        )
        or '<tr><td colspan=9 class="muted">no requests yet</td></tr>'
    )
    return (
        '<section class="wide" id="recent"><h2>Recent requests</h2>'
        '<table id="recent-requests"><tr><th>time (UTC)</th><th>tenant</th><th>key</th>'
        "<th>route</th><th>model</th><th class=n>status</th><th class=n>cost</th>"
        f"<th class=n>latency</th><th>request id</th></tr>{rows}</table></section>"
    )


def _changed(changed: str) -> str:
    """What the gateway changed in the request it sent, under the model that served it."""
    if not changed:
        return ""
    return f'<br><span class="muted">changed: {_e(changed.replace(",", ", "))}</span>'


def _refusals(page: ConsolePage) -> str:
    rows = (
        "".join(
            "<tr>"
            f"<td>{_e(_time(r.time))}</td><td class=n>{r.status}</td><td>{_e(r.code)}</td>"
            f"<td>{_e(r.tenant)}</td><td>{_e(r.key_id)}</td><td>{_e(r.route)}</td>"
            f"<td>{_e(r.reason)}</td>"
            f'<td class="muted">{_e(r.request_id)}</td>'
            "</tr>"
            for r in page.refusals
        )
        or '<tr><td colspan=8 class="muted">no refusals yet</td></tr>'
    )
    return (
        '<section class="wide" id="refusals"><h2>Refused and failed requests</h2>'
        '<p class="muted">4xx/5xx answers and limit refusals: they spent nothing, so the '
        "ledger and spend above leave them out (this process's newest).</p>"
        '<table id="recent-refusals"><tr><th>time (UTC)</th><th class=n>status</th>'
        "<th>code</th><th>tenant</th><th>key</th><th>route</th><th>reason</th>"
        f"<th>request id</th></tr>{rows}</table></section>"
    )


def _limits(row: dict[str, Any]) -> str:
    parts = [f"{_e(k)}={_e(v)}" for k, v in (row.get("limits") or {}).items()]
    parts += [f"${_e(b['usd'])}/{_e(b.get('period', 'month'))}" for b in row.get("budgets") or []]
    return ", ".join(parts) or '<span class="muted">none</span>'


def _keys(page: ConsolePage) -> str:
    tenants = "".join(
        f"<tr><td>{_e(t['id'])}</td><td>{_e(t['source'])}</td><td class=n>{t['keys']}</td>"
        f"<td>{_limits(t)}</td></tr>"
        for t in page.tenants
    )
    keys = "".join(
        f'<tr id="key-{_e(k["id"])}"><td>{_e(k["id"])}</td><td>{_e(k["tenant"])}</td>'
        f"<td>{_e(k['source'])}</td>"
        f'<td class="status-{_e(k["status"])}">{_e(k["status"])}</td>'
        f"<td>{_e(', '.join(k['models'])) if k.get('models') else 'all'}</td>"
        f"<td>{_limits(k)}</td><td>{_revoke(k)}</td></tr>"
        for k in page.keys
    )
    return (
        '<section class="wide" id="keys"><h2>Tenants and keys</h2>'
        '<table id="tenants"><tr><th>tenant</th><th>source</th><th class=n>live keys</th>'
        f"<th>limits and budgets</th></tr>{tenants}</table><br>"
        '<table id="key-list"><tr><th>key</th><th>tenant</th><th>source</th><th>status</th>'
        f"<th>models</th><th>limits and budgets</th><th></th></tr>{keys}</table></section>"
    )


def _revoke(key: dict[str, Any]) -> str:
    if key["source"] != "runtime" or key["status"] == "revoked":
        return ""
    return (
        f'<form class="inline" method="post" action="/console/keys/{_e(key["id"])}/revoke">'
        "<button>revoke</button></form>"
    )


def _forms(page: ConsolePage) -> str:
    runtime_tenants = [t["id"] for t in page.tenants if t["source"] == "runtime"]
    options = "".join(f"<option>{_e(t)}</option>" for t in runtime_tenants)
    key_form = (
        '<form method="post" action="/console/keys" id="create-key">'
        f'<label>tenant <select name="tenant" id="key-tenant">{options}</select></label>'
        '<label>key id <input name="id" id="key-id" required></label>'
        '<label>models <input name="models" placeholder="all (or a,b)"></label>'
        '<label>requests/min <input name="rpm" type="number" min="1"></label>'
        '<label>budget $ <input name="budget_usd" inputmode="decimal"></label>'
        '<button type="submit" id="create-key-button">Create key</button></form>'
        if runtime_tenants
        else '<p class="muted">Create a tenant first: keys made here belong to runtime '
        "tenants (YAML tenants change in their policy file).</p>"
    )
    return (
        '<section class="wide" id="create"><h2>Create</h2>'
        '<form method="post" action="/console/tenants" id="create-tenant">'
        '<label>tenant id <input name="id" id="tenant-id" required></label>'
        '<label>requests/min <input name="rpm" type="number" min="1"></label>'
        '<label>budget $ <input name="budget_usd" inputmode="decimal"></label>'
        '<label>per <select name="budget_period"><option>month</option><option>day</option>'
        "</select></label>"
        '<button type="submit" id="create-tenant-button">Create tenant</button></form>'
        f"{key_form}</section>"
    )


def _bold(text: str) -> str:
    return f"<b>{_e(text)}</b>"


def _money(cost: str) -> str:
    try:
        return f"{float(cost):.6f}".rstrip("0").rstrip(".") or "0"
    except ValueError:
        return _e(cost)


def _width(cost: str, top: float) -> int:
    return int(300 * float(cost) / top) if top > 0 else 0


def _time(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S")
