"""The console's share of the pipeline: admin-key login into a session, and the facts one
page shows (spend over time, keys and limits, recent requests, breakers), read from
where they already live: the ledger, the admin store, the breaker boards.

A session is a random token in an HttpOnly cookie; the store keeps only its SHA-256
hash, with a TTL, so every replica on one Redis knows it and logging out ends it
everywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gateway.admin.client_keys import hash_key
from gateway.admin.console_pages import RANGES, ConsolePage
from gateway.errors import AuthenticationFailed, PermissionDenied
from gateway.metering.aggregates import LedgerKeys
from gateway.metering.ledger_record import LedgerRecord
from gateway.metering.recent import recent_memory, recent_redis
from gateway.metering.spend import GroupBy, SpendQuery

if TYPE_CHECKING:
    from gateway.pipeline.runtime import GatewayRuntime

SESSION_COOKIE = "gw_console"
SESSION_SECONDS = 8 * 3600
RECENT_REQUESTS = 50


def _session_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def log_in(runtime: GatewayRuntime, admin_key: str) -> str:
    """A new session's token for the admin key, or AuthenticationFailed."""
    expected = runtime.settings.config.server.admin_key_hash
    if not expected:
        raise PermissionDenied(
            "The console is off: set server.admin_key_hash to enable it.", code="admin_disabled"
        )
    if not admin_key or not hmac.compare_digest(hash_key(admin_key), expected):
        runtime.metrics.admin.console_login(False)
        raise AuthenticationFailed("That is not the admin key.")
    token = secrets.token_urlsafe(32)
    await runtime.runtime_keys.store.open_session(_session_hash(token), SESSION_SECONDS)
    runtime.metrics.admin.console_login(True)
    return token


async def session_alive(runtime: GatewayRuntime, token: str | None) -> bool:
    if not token or not runtime.settings.config.server.admin_key_hash:
        return False
    return await runtime.runtime_keys.store.session_alive(_session_hash(token))


async def log_out(runtime: GatewayRuntime, token: str | None) -> None:
    if token:
        await runtime.runtime_keys.store.end_session(_session_hash(token))


async def console_page(
    runtime: GatewayRuntime,
    range_name: str,
    *,
    new_key: dict[str, Any] | None = None,
    notice: str = "",
) -> ConsolePage:
    """Every section's facts; a section whose source does not answer (Redis down) is
    empty with a problem line, the others still show."""
    if range_name not in RANGES:
        range_name = "7d"
    # whole UTC days, today's so far included: the ledger's day counters answer them
    # exactly and cheaply, where a range starting mid-day reads every record of it from
    # the Redis stream, which keeps only the newest (store.ledger_stream_max_records)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since = today - timedelta(days=RANGES[range_name] - 1)
    problems: list[str] = []
    by_day: list[tuple[str, str, int]] = []
    spend_by: dict[str, list[tuple[str, str, int]]] = {}
    group_bys: tuple[GroupBy, ...] = ("day", "tenant", "key", "model")
    for group_by in group_bys:
        try:
            report = await runtime.spend_report(SpendQuery(since=since, group_by=group_by))
        except Exception as exc:
            problems.append(
                f"spend by {group_by}: the ledger did not answer ({type(exc).__name__})"
            )
            continue
        rows = [
            (str(row["group"]), str(row["cost_usd"]), int(row["requests"])) for row in _rows(report)
        ]
        if group_by == "day":
            by_day = sorted(rows)
        else:
            spend_by[group_by] = sorted(rows, key=lambda r: -float(r[1]))
    tenants: list[dict[str, Any]] = []
    keys: list[dict[str, Any]] = []
    try:
        tenants = await runtime.tenancy.tenants()
        keys = await runtime.tenancy.keys()
    except Exception as exc:
        problems.append(f"keys: the admin store did not answer ({type(exc).__name__})")
    recent: list[LedgerRecord] = []
    try:
        recent = await recent_requests(runtime, RECENT_REQUESTS)
    except Exception as exc:
        problems.append(f"recent requests: the ledger did not answer ({type(exc).__name__})")
    return ConsolePage(
        range_name,
        by_day,
        spend_by,
        tenants,
        keys,
        recent,
        dict(sorted(runtime.breakers.states().items())),
        new_key=new_key,
        notice=notice,
        problems=problems,
        refusals=runtime.refusals.newest(RECENT_REQUESTS),
    )


def _rows(report: dict[str, object]) -> list[dict[str, Any]]:
    rows = report.get("rows")
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


async def recent_requests(runtime: GatewayRuntime, limit: int) -> list[LedgerRecord]:
    stores = runtime.stores
    if stores.memory_ledger is not None:
        return recent_memory(stores.memory_ledger, limit)
    keys = LedgerKeys(runtime.settings.config.store.key_prefix)
    return await recent_redis(stores.redis, keys, limit)
