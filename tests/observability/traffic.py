"""Known traffic recorded straight into a GatewayMetrics, and a real HTTP `/metrics`
endpoint serving it on 127.0.0.1, for Prometheus to scrape."""

from __future__ import annotations

import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from gateway.observability.metrics import GatewayMetrics
from gateway.usage import Usage


def record_mixed_traffic(metrics: GatewayMetrics) -> None:
    """One of every event the pipeline reports: a plain request, a stream, a fallback,
    a 429, a retry, an open circuit, Redis trouble, a reload, backend scrapes, spans
    exported and lost."""
    metrics.request_started("auto")
    metrics.routing_decision("auto", "gpt-4.1")
    metrics.retry("openai", "502")
    metrics.fallback("auto", "gpt-4.1", "upstream_unavailable")
    metrics.learned_fallback("auto-learned", "saturated")
    metrics.route_quality("auto-kept", "unmeasured")
    metrics.routing_decision("auto", "claude-sonnet-4.5")
    metrics.request_finished(
        "auto", "claude-sonnet-4.5", "anthropic", 200, 1.5, None, 1.49, stream=False
    )
    metrics.tokens(
        "claude-sonnet-4.5", "anthropic", "acme", Usage(input_tokens=10, output_tokens=5)
    )
    metrics.spend("acme", "claude-sonnet-4.5", "anthropic", Decimal("0.000105"))
    metrics.token_lengths("claude-sonnet-4.5", 10, 5)

    metrics.request_started("llama")
    metrics.routing_decision("llama", "emulated-llama")
    for _ in range(3):
        metrics.inter_token_latency("emulated-llama", 0.02)
    metrics.request_finished("llama", "emulated-llama", "emulator", 200, 0.8, 0.1, 0.79, True)
    usage = Usage(input_tokens=100, cached_input_tokens=64, output_tokens=20, reasoning_tokens=4)
    metrics.tokens("emulated-llama", "emulator", "beta", usage)
    metrics.spend("beta", "emulated-llama", "emulator", Decimal("0.00001"))
    metrics.token_lengths("emulated-llama", 100, 20)

    metrics.request_started("auto")
    metrics.rate_limited("tenant", "requests")
    metrics.admission_grant("used")
    metrics.request_finished("auto", None, None, 429, 0.001, None, None, stream=False)

    metrics.request_started("auto")
    metrics.request_finished("auto", "gpt-4.1", "openai", 502, 2.0, None, 1.99, stream=False)

    metrics.circuit_state("openai/gpt-4.1", "open")
    metrics.cooldown("openai/gpt-4.1")
    metrics.breaker_panic("auto", "openai/gpt-4.1")
    metrics.breaker_fail_fast("auto")
    metrics.budget_used("acme", 0.93)
    metrics.redis_latency("admit", 0.0004)
    metrics.redis_error("admit")
    evaluation = metrics.evaluation
    evaluation.enqueued()
    evaluation.dropped("daily_cap")
    evaluation.labelled("judge")
    evaluation.spent("acme", Decimal("0.002"))
    evaluation.queue_depth_now(1)
    evaluation.measured(
        [
            ("auto", "all", "all", "gpt-4.1", 0.9, 0.8, 1.0, 40, Decimal("0.1"), Decimal("2")),
            ("auto", "gemini", "all", "gpt-4.1", 0.9, 0.8, 1.0, 40, Decimal("0.1"), Decimal("2")),
            ("auto", "gemini", "code", "gpt-4.1", 0.7, 0.5, 0.9, 12, Decimal("0.03"), Decimal("1")),
        ]
    )
    metrics.policy_reload(True)
    metrics.policy_reload(False)
    metrics.cache_lookup("auto", "miss")
    metrics.cache_write("auto", "stored", 2048)
    metrics.cache_hit("auto", "acme", "gpt-4.1", 2048, Decimal("0.0031"))
    metrics.ledger_queue_depth(3)
    metrics.ledger_write_failure()
    metrics.trace_spans(exported=16, dropped=2, export_failures=1)
    metrics.backend("http://emulator-1:30000/v1", 12, 3, 0.41, 0.62)
    metrics.backend("http://emulator-2:30000/v1", 9, 0, 0.33, 0.58)


class MetricsEndpoint:
    """`GET /metrics` answering with `metrics.render()`, on a free port."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        render = metrics.render

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body, content_type = render()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def __enter__(self) -> MetricsEndpoint:
        self.thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
