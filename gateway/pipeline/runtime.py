"""Everything one gateway process holds for its lifetime, built once from the settings
and passed to the handlers: no module-level state."""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry

from gateway.observability.logs import AccessLog, LogPipeline
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.flow import Flow
from gateway.pipeline.keys import Caller
from gateway.pipeline.live_stats import LiveStatsTracker
from gateway.pipeline.policy_view import PolicyView
from gateway.pipeline.reload import PolicyReloader
from gateway.pipeline.settle import record_metrics, write_access_log
from gateway.providers.transport import Transport
from gateway.resilience.async_breaker import AsyncLocalBreakerBoard
from gateway.resilience.breaker import BreakerBoard
from gateway.routing.state import TenantState
from gateway.settings import Settings
from gateway.tokens import count_prompt
from gateway.usage import Usage

log = logging.getLogger("gateway")


class GatewayRuntime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.view = PolicyView.build(settings.policy)
        self.transport = Transport(settings.config.providers)
        self.breakers = AsyncLocalBreakerBoard(BreakerBoard())
        listen = settings.config.server
        self.metrics = GatewayMetrics.from_environment(
            registry=CollectorRegistry(), tenant_labels=listen.metrics_tenant_labels
        )
        self.dispatcher = Dispatcher(
            settings.config.providers, self.transport, self.breakers, self.metrics.retry
        )
        self.access_log = AccessLog(log_content=listen.log_content)
        self.log_pipeline = LogPipeline(listen.log_format)
        self.live_stats = LiveStatsTracker()
        self.ready = False
        self.started_at = time.time()
        self.reloader = PolicyReloader(settings, self._apply_settings, self._count_reload)

    def _apply_settings(self, settings: Settings) -> None:
        self.settings = settings
        self.view = PolicyView.build(settings.policy)

    def _count_reload(self, ok: bool) -> None:
        self.metrics.policy_reload(ok)

    async def start(self) -> None:
        # the log writer thread is per process: started here, in each worker's lifespan
        self.log_pipeline.install()
        self.log_pipeline.start()
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.reloader.start()
        self.ready = True

    async def readiness(self) -> dict[str, object]:
        """Config loaded, store reachable: what /readyz reports."""
        return {
            "ready": self.ready,
            "config": str(self.settings.config_path),
            "store": {"kind": self.settings.config.store.kind, "state": "ok"},
        }

    async def stop(self) -> None:
        self.ready = False
        await self.reloader.stop()
        await self.transport.close()
        self.log_pipeline.stop()

    def price(self, flow: Flow) -> None:
        """Cost of the served request; counts tokens itself when the provider reported
        none (an abandoned stream, an upstream that omits usage) and marks it estimated."""
        if flow.served_by is None or flow.request is None:
            return
        usage = flow.usage
        if usage is None or (usage.input_tokens == 0 and usage.output_tokens == 0):
            model = flow.served_by.settings
            usage = Usage(
                input_tokens=count_prompt(flow.request, model.tokenizer),
                output_tokens=flow.streamed_chunks,
                estimated=True,
            )
            flow.usage = usage
        prices = flow.served_by.deployment.prices or flow.served_by.settings.prices
        flow.cost = prices.cost_of(usage)
        flow.headers["x-gateway-cost-usd"] = format(flow.cost.normalize(), "f")

    def tenant_state(self, caller: Caller) -> TenantState:
        """What the planner needs to know of the tenant's spend (budget downgrades)."""
        return TenantState()

    def settle(self, flow: Flow) -> None:
        """After the response: price, meter, count and log. Never raises."""
        try:
            flow.finished = time.perf_counter()
            if flow.cost is None:
                self.price(flow)
            record_metrics(self.metrics, flow, flow.finished)
            self._observe_live_stats(flow)
            write_access_log(self.access_log, flow, flow.finished)
        except Exception:
            log.exception("settling request %s failed", flow.request_id)

    def _observe_live_stats(self, flow: Flow) -> None:
        if flow.served_by is None or flow.status != 200 or flow.upstream_started is None:
            return
        # a non-streamed answer's first token arrives with the whole answer
        first = flow.first_token_at if flow.first_token_at is not None else flow.finished
        ttft = (first or flow.upstream_started) - flow.upstream_started
        output = flow.usage.output_tokens if flow.usage else 0
        self.live_stats.observe(flow.served_by.deployment_id, flow.route, ttft, output)
