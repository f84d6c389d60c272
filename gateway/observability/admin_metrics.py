"""The admin API's, the runtime key set's and the console's metrics (a part of
:class:`GatewayMetrics`, on the same registry or multiprocess files)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

# what an admin change can come to (labels are fixed names, never request values)
CHANGE_OUTCOMES = ("ok", "refused", "failed")
ADMIN_ACTIONS = (
    "tenant.create",
    "tenant.update",
    "tenant.delete",
    "key.create",
    "key.update",
    "key.rotate",
    "key.revoke",
)


class AdminMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.changes_total = Counter(
            "gateway_admin_changes_total",
            "Admin API changes by action (tenant.create, key.revoke, ...) and outcome "
            "(ok, refused: a 4xx, failed: the store did not answer).",
            ("action", "outcome"),
            registry=registry,
        )
        self.runtime_keys = Gauge(
            "gateway_runtime_keys",
            "Runtime keys in this process's copy of the admin store, by status "
            "(active, rotating, revoked).",
            ("status",),
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.runtime_tenants = Gauge(
            "gateway_runtime_tenants",
            "Runtime tenants in this process's copy of the admin store.",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.version = Gauge(
            "gateway_runtime_keys_version",
            "The admin store version this process's copy of runtime keys is at.",
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.sync_age = Gauge(
            "gateway_runtime_keys_sync_age_seconds",
            "Seconds since the admin store last answered this process (it grows while "
            "Redis is unreachable and the last known key set serves).",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.console_logins_total = Counter(
            "gateway_console_logins_total",
            "Console login attempts by outcome (ok, refused).",
            ("outcome",),
            registry=registry,
        )
        for action in ADMIN_ACTIONS:
            for outcome in CHANGE_OUTCOMES:
                self.changes_total.labels(action, outcome)
        for status in ("active", "rotating", "revoked"):
            self.runtime_keys.labels(status)
        for outcome in ("ok", "refused"):
            self.console_logins_total.labels(outcome)

    def change(self, action: str, outcome: str) -> None:
        if action in ADMIN_ACTIONS and outcome in CHANGE_OUTCOMES:
            self.changes_total.labels(action, outcome).inc()

    def key_set(self, version: int, tenants: int, by_status: dict[str, int]) -> None:
        self.version.set(version)
        self.runtime_tenants.set(tenants)
        for status in ("active", "rotating", "revoked"):
            self.runtime_keys.labels(status).set(by_status.get(status, 0))

    def synced(self, age_seconds: float | None) -> None:
        self.sync_age.set(-1 if age_seconds is None else age_seconds)

    def console_login(self, ok: bool) -> None:
        self.console_logins_total.labels("ok" if ok else "refused").inc()
