"""A throwaway Prometheus (Debian's `prometheus` package) scraping given targets, and the
PromQL expressions of the shipped dashboard and alert rules.

`PrometheusServer([target_url])` scrapes any `/metrics` URL: the tests point it at an
in-process exposition; a live gateway (`http://127.0.0.1:PORT/metrics`) plugs in the same
way.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "deploy" / "grafana" / "dashboards"
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
MISSING_BINARY = (
    "{name} not found on PATH: install Debian's `prometheus` package "
    "(apt-get install -y prometheus; .ci/run does it)"
)

# What Grafana puts in place of its variables before sending a query.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
}


@dataclass(frozen=True)
class Expression:
    source: str  # "dashboard <file>: <panel title> [refId]" or "alert <name>"
    promql: str


def grafana_to_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    leftover = re.search(r"\$\{?\w+", expr)
    if leftover:
        raise ValueError(f"unknown Grafana variable {leftover.group()} in {expr!r}")
    return expr


def dashboard_expressions(directory: Path = DASHBOARDS) -> list[Expression]:
    found: list[Expression] = []
    for path in sorted(directory.glob("*.json")):
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        for panel in _panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    source = f"dashboard {path.name}: {panel['title']} [{target['refId']}]"
                    found.append(Expression(source, grafana_to_promql(target["expr"])))
    return found


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for panel in panels:
        flat.append(panel)
        flat.extend(_panels(panel.get("panels", [])))
    return flat


def alert_expressions(path: Path = PROMETHEUS_DIR / "alerts.yml") -> list[Expression]:
    rules = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [
        Expression(f"alert {rule.get('alert') or rule.get('record')}", rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
    ]


def binary(name: str) -> str | None:
    return shutil.which(name)


@dataclass(frozen=True)
class QueryResult:
    ok: bool
    error: str
    series: int


class PrometheusServer:
    """One Prometheus process on a free 127.0.0.1 port, scraping `targets` every second."""

    def __init__(self, targets: list[str], scrape_interval: str = "1s") -> None:
        executable = binary("prometheus")
        if executable is None:
            raise RuntimeError(MISSING_BINARY.format(name="prometheus"))
        self.executable = executable
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gw-prometheus-"))
        self.config_path = self.dir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(_config(targets, scrape_interval)))
        self.process: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    def start(self, timeout: float = 30.0) -> None:
        self.process = subprocess.Popen(
            [
                self.executable,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                stderr = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"prometheus exited at start: {stderr[-2000:]}")
            try:
                if self.client.get("/-/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready on port {self.port} after {timeout}s")

    def stop(self) -> None:
        self.client.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def query(self, promql: str) -> QueryResult:
        response = self.client.get("/api/v1/query", params={"query": promql})
        body = response.json()
        if body.get("status") != "success":
            return QueryResult(False, f"{body.get('errorType')}: {body.get('error')}", 0)
        result = body["data"]["result"]
        series = len(result) if isinstance(result, list) else 1
        return QueryResult(True, "", series)

    def scrapes(self) -> int:
        """How many scrapes of the least scraped target succeeded so far (Prometheus
        starts scraping its targets five seconds after its own start)."""
        response = self.client.get("/api/v1/query", params={"query": "min(sum_over_time(up[5m]))"})
        result = response.json()["data"]["result"]
        return int(float(result[0]["value"][1])) if result else 0

    def wait_for_scrapes(self, count: int, timeout: float = 30.0) -> None:
        """Until every target has been scraped `count` times successfully and is up."""
        deadline = time.monotonic() + timeout
        query = f"min(sum_over_time(up[5m])) >= {count} and min(up) == 1"
        while time.monotonic() < deadline:
            if self.query(query).series:
                return
            time.sleep(0.25)
        up = self.client.get("/api/v1/targets").json()
        raise AssertionError(f"targets not scraped {count} times in {timeout}s: {up}")


def _config(targets: list[str], scrape_interval: str) -> dict[str, Any]:
    jobs = []
    for i, url in enumerate(targets):
        parts = urlsplit(url)
        jobs.append(
            {
                "job_name": f"target-{i}",
                "scheme": parts.scheme or "http",
                "metrics_path": parts.path or "/metrics",
                "static_configs": [{"targets": [parts.netloc]}],
            }
        )
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": jobs,
    }


def expression_problems(
    target_url: str, send_traffic: Callable[[], None], scrapes_before: int = 2
) -> list[str]:
    """Every dashboard and alert expression, evaluated by a real Prometheus scraping
    `target_url`: each must parse, and each dashboard panel must return data.

    `send_traffic` runs after the first scrapes, and two more follow its end, so rates
    see the counters move, the last of them too; pass a function that sends requests to
    a live gateway to check the dashboard against it.
    """
    with PrometheusServer([target_url], scrape_interval=SCRAPE_INTERVAL) as prometheus:
        return problems_seen_by(prometheus, send_traffic, scrapes_before)


# twice a second: the scrapes before and after the traffic are what the check waits on
SCRAPE_INTERVAL = "500ms"


def problems_seen_by(
    prometheus: PrometheusServer, send_traffic: Callable[[], None], scrapes_before: int = 2
) -> list[str]:
    """expression_problems with a Prometheus already running (started before its target,
    its first scrapes need not wait for the target's start)."""
    problems: list[str] = []
    prometheus.wait_for_scrapes(scrapes_before)
    send_traffic()
    prometheus.wait_for_scrapes(max(scrapes_before, prometheus.scrapes()) + 2)
    for expression in dashboard_expressions():
        result = prometheus.query(expression.promql)
        if not result.ok:
            problems.append(f"{expression.source}: does not parse: {result.error}")
        elif result.series == 0:
            problems.append(f"{expression.source}: no data for {expression.promql}")
    for expression in alert_expressions():
        result = prometheus.query(expression.promql)
        if not result.ok:
            problems.append(f"{expression.source}: does not parse: {result.error}")
    return problems
