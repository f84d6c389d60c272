"""Everything one gateway process holds for its lifetime, built once from the settings
and passed to the handlers: no module-level state."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from gateway.admin import AdminSnapshot, MemoryAdminStore, RedisAdminStore
from gateway.admin.merge import merge
from gateway.admin.runtime_keys import RuntimeKeys
from gateway.admin.tenancy import TenancyAdmin
from gateway.cache.answer_store import MemoryAnswerCache
from gateway.limits import LimitStore, MemoryLimitStore
from gateway.metering.aggregates import LedgerKeys
from gateway.metering.ledger import LedgerWriter
from gateway.metering.memory_ledger import MemoryLedger
from gateway.metering.spend import SpendQuery, query_memory, query_redis
from gateway.observability.logs import AccessLog, LogPipeline
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.refusals import RecentRefusals
from gateway.observability.tracing import Tracer, TracingConfigError, open_tracer
from gateway.pipeline.admit import Admitter
from gateway.pipeline.breakers import breaker_boards
from gateway.pipeline.budget_use import BudgetUse
from gateway.pipeline.conversation import ConversationStage
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.endpoints import ingress_codecs
from gateway.pipeline.evaluation_stage import EvaluationStage
from gateway.pipeline.flow import Flow
from gateway.pipeline.learned_scoring import LearnedScoring
from gateway.pipeline.live_stats import LiveStatsTracker
from gateway.pipeline.policy_view import PolicyView
from gateway.pipeline.pricing import Pricer
from gateway.pipeline.reload import PolicyReloader
from gateway.pipeline.request_ids import RequestIds
from gateway.pipeline.respond import Responder
from gateway.pipeline.response_cache import ResponseCacheStage
from gateway.pipeline.scorer_watch import ScorerVersionWatch
from gateway.pipeline.settle import Settler, record_spend
from gateway.pipeline.stores import Stores, open_stores
from gateway.pipeline.trace_spans import provider_names
from gateway.providers.transport import Transport
from gateway.redaction import SecretRedactor, secret_header
from gateway.settings import Settings
from gateway.settings.server import StoreSettings
from gateway.state import Conversations, open_conversation_store
from gateway.tokens import PromptCounter, count_text

log = logging.getLogger("gateway")


def provider_secrets_redactor(settings: Settings) -> SecretRedactor:
    """Every credential the gateway holds for its providers, for the one redaction step
    errors pass through on their way to a client."""
    secrets: list[str] = []
    for provider in settings.config.providers.values():
        if provider.api_key is not None:
            secrets.append(provider.api_key.get_secret_value())
        secrets.extend(v for k, v in provider.headers.items() if secret_header(k))
    return SecretRedactor(secrets)


class GatewayRuntime:
    def __init__(self, settings: Settings, *, serving_process: bool = False) -> None:
        """`serving_process`: this process exists to serve (`gateway serve`), so it may tune
        process-wide things such as the garbage collector once started."""
        self.settings = settings
        self._serving_process = serving_process
        self.view = PolicyView.build(settings.policy)
        self.transport = Transport(settings.config.providers)
        self.redactor = provider_secrets_redactor(settings)
        self.metrics = GatewayMetrics.from_environment(
            registry=CollectorRegistry(),
            tenant_labels=settings.config.server.metrics_tenant_labels,
        )
        self.breakers = breaker_boards(
            settings.config, lambda name, old, new: self.metrics.circuit_state(name, new)
        )
        listen = settings.config.server
        self.dispatcher = Dispatcher(
            settings.config.providers,
            self.transport,
            self.breakers,
            on_retry=self.metrics.retry,
            on_circuit=self.metrics.circuit_state,
            on_panic=self.metrics.breaker_panic,
            on_fail_fast=self.metrics.breaker_fail_fast,
            on_cooldown=self.metrics.cooldown,
        )
        self.log_pipeline = LogPipeline(listen.log_format)
        self.access_log = AccessLog(
            log_content=listen.log_content,
            content_share=listen.log_content_share,
            pipeline=self.log_pipeline,
        )
        self.live_stats = LiveStatsTracker()
        self.request_ids = RequestIds()
        self.pricer = Pricer(settings.config.providers)
        self.codecs = ingress_codecs(settings.config.server.max_json_depth)
        self.budget_use = BudgetUse()
        self.scoring = LearnedScoring(on_fallback=self.metrics.learned_fallback)
        self.scoring.load(settings.policy)
        # follows promoted `redis:ROUTE` scorer versions; started with a Redis store
        self.scorer_watch: ScorerVersionWatch | None = None
        self.responder = Responder(
            self.dispatcher, self.pricer, self.redactor, on_answered=self._record_answer
        )
        self.refusals = RecentRefusals()
        self.settler = Settler(
            self.pricer,
            self.metrics,
            self.live_stats,
            self.access_log,
            provider_names(settings.config.providers),
            self.refusals,
        )
        # OpenTelemetry traces: built in start() (in each worker, after it forked) when
        # the OTEL_* variables ask for them; None costs a request a few `is None` tests
        self.tracer: Tracer | None = None
        self._spans_reported = (0, 0, 0)
        # stored Responses conversations: in memory until start() opens the configured store
        self.conversation = ConversationStage(
            Conversations(open_conversation_store(StoreSettings(), settings.config.conversations))
        )
        self.prompt_counter = PromptCounter()
        # replaced by the configured stores in start(); in-memory until then
        memory_ledger = MemoryLedger()
        self.stores = Stores(
            limits=MemoryLimitStore(),
            ledger=memory_ledger,
            answers=MemoryAnswerCache(settings.config.response_cache.memory_max_bytes),
            memory_ledger=memory_ledger,
        )
        self.admitter = Admitter(
            self.stores.limits,
            settings.config.store.key_prefix,
            self.metrics,
            self.budget_use,
            self.prompt_counter,
        )
        self.response_cache = ResponseCacheStage(
            self.stores.answers,
            settings.config.store.key_prefix,
            self.metrics,
            on_answered=self._record_answer,
        )
        self._reporter: asyncio.Future[None] | None = None
        self.ready = False
        self.started_at = time.time()
        self.reloader = PolicyReloader(settings, self._apply_settings, self._count_reload)
        # runtime tenants and keys (admin API): in memory until start() opens the store
        self.runtime_keys = RuntimeKeys(
            MemoryAdminStore(),
            self._adopt_runtime_keys,
            poll_seconds=settings.config.store.runtime_keys_poll_ms / 1000,
        )
        self.tenancy = TenancyAdmin(
            self.runtime_keys, lambda: self.settings.policy, self.metrics.admin
        )
        # stage 9: online evaluation (its labels store is opened in start())
        self.evaluation = EvaluationStage(self)

    def _record_answer(self, flow: Flow) -> None:
        record_spend(self.stores.ledger, flow, time.perf_counter())

    def _apply_settings(self, settings: Settings) -> None:
        self.settings = settings
        self._rebuild_view()
        self.scoring.load(settings.policy)

    def _adopt_runtime_keys(self, snapshot: AdminSnapshot) -> None:
        self._rebuild_view()
        now = time.time()
        # revoked keys are only counted in a snapshot (their records stay in the store)
        statuses: dict[str, int] = {"revoked": snapshot.revoked}
        for record in snapshot.keys.values():
            status = record.status(now)
            statuses[status] = statuses.get(status, 0) + 1
        self.metrics.admin.key_set(snapshot.version, len(snapshot.tenants), statuses)

    async def view_after_catching_up(self, seen: PolicyView) -> PolicyView | None:
        """A newer view than `seen` once the runtime key set is caught up with the store
        (None: nothing changed, an unknown key stays unknown)."""
        if self.view is not seen or await self.runtime_keys.caught_up():
            return self.view
        return None

    def _rebuild_view(self) -> None:
        """The YAML policy with the runtime tenants and keys merged in: one reference swap,
        a request in flight keeps the view it started with."""
        merged = merge(self.settings.policy, self.runtime_keys.snapshot, time.time())
        if merged.shadowed:
            log.error(
                "the YAML policy now defines %s: the runtime entries of the same name are "
                "ignored while it does (YAML wins)",
                ", ".join(merged.shadowed),
            )
        self.view = PolicyView.build(merged.policy, merged.retiring)

    def _count_reload(self, ok: bool) -> None:
        self.metrics.policy_reload(ok)

    async def start(self) -> None:
        # the log writer thread is per process: started here, in each worker's lifespan
        self.log_pipeline.install()
        self.log_pipeline.start()
        logging.getLogger("httpx").setLevel(logging.WARNING)
        # load the tokenizer now rather than on the first request (half a second)
        count_text("warm up")
        config = self.settings.config
        self.stores = await open_stores(config.store, config.response_cache)
        self.conversation = ConversationStage(
            Conversations(open_conversation_store(config.store, config.conversations))
        )
        self.admitter = Admitter(
            self.stores.limits,
            self.settings.config.store.key_prefix,
            self.metrics,
            self.budget_use,
            self.prompt_counter,
            shared=self.stores.guard is not None,
            # fail_closed asks that nothing be served while the store cannot be reached;
            # a grant is used later than the store was last heard from
            grants=config.store.admission_grants and config.store.on_failure == "fail_open",
        )
        self.response_cache = ResponseCacheStage(
            self.stores.answers,
            config.store.key_prefix,
            self.metrics,
            shared=self.stores.guard is not None,
            on_answered=self._record_answer,
        )
        self.metrics.prime(redis_ops=("admit",) if self.stores.guard is not None else ())
        if self.stores.redis is not None:
            self.runtime_keys.store = RedisAdminStore(self.stores.redis, config.store.key_prefix)
            # always on with Redis (a reload may add a `redis:` scorer); a policy naming
            # none costs nothing a tick
            self.scorer_watch = ScorerVersionWatch(
                self.stores.redis,
                config.store.key_prefix,
                self.scoring,
                lambda: self.settings.policy,
            )
            await self.scorer_watch.refresh()
            self.scorer_watch.start()
        await self.runtime_keys.start()
        self.tracer = start_tracing(os.environ)
        if self.tracer is not None:
            self.metrics.trace_spans(0, 0, 0)
        await self.dispatcher.start()
        await self.evaluation.start()
        self.reloader.start()
        self._reporter = asyncio.ensure_future(self._report_state())
        if self._serving_process:
            settle_the_heap()
        self.ready = True

    @property
    def limit_store(self) -> LimitStore:
        return self.stores.limits

    @property
    def ledger(self) -> LedgerWriter:
        return self.stores.ledger

    async def readiness(self) -> dict[str, object]:
        """Config loaded, store reachable: what /readyz reports. A degraded store keeps
        the gateway ready in fail_open mode (it serves) and not in fail_closed (it refuses)."""
        store = self.settings.config.store
        if self.stores.guard is not None:
            # ask the store now: a gateway taken out of rotation gets no traffic that
            # would notice Redis leave or come back
            await self.stores.guard.ping()
        state = self.stores.state
        serving = state == "ok" or store.on_failure == "fail_open"
        return {
            "ready": self.ready and serving,
            "config": str(self.settings.config_path),
            "store": {"kind": store.kind, "state": state, "on_failure": store.on_failure},
            "ledger_queue_depth": getattr(self.stores.ledger, "queue_depth", 0),
        }

    async def stop(self) -> None:
        self.ready = False
        if self._reporter is not None:
            self._reporter.cancel()
        await self.reloader.stop()
        if self.scorer_watch is not None:
            await self.scorer_watch.stop()
        await self.runtime_keys.stop()
        # its last notes and the reference and judge calls' records go out before the stores close
        await self.evaluation.stop()
        await self.admitter.drain()
        grace = self.settings.config.server.shutdown_grace_seconds
        await self.stores.close(grace_seconds=max(1.0, grace))
        await self.conversation.conversations.store.close()
        await self.dispatcher.stop()
        await self.transport.close()
        if self.tracer is not None:
            # the last spans go out on the export thread, within a bounded wait
            await asyncio.to_thread(self.tracer.shutdown, max(1.0, min(5.0, grace)))
            self._report_spans()
        self.scoring.close()
        self.log_pipeline.stop()
        self.metrics.flush()  # multiprocess mode: this worker's last values to its files

    async def spend_report(self, query: SpendQuery) -> dict[str, object]:
        """The ledger read back: the process's own records in memory mode, the shared
        Redis ledger otherwise."""
        if self.stores.memory_ledger is not None:
            return query_memory(self.stores.memory_ledger, query).as_json()
        assert self.stores.redis is not None
        keys = LedgerKeys(self.settings.config.store.key_prefix)
        report = await query_redis(self.stores.redis, query, keys)
        return report.as_json()

    async def _report_state(self) -> None:
        """Once a second: the ledger's queue and write failures, and each GPU replica's
        load as the gateway and the replica's own metrics see it."""
        failures_seen = 0
        seconds = 0
        # measured quality from the labels store, every `evaluation.refresh_seconds`
        # (the first time one second in)
        refresh = self.settings.config.evaluation.refresh_seconds
        task = asyncio.current_task()
        while True:
            await asyncio.sleep(1.0)
            seconds += 1
            self._report_spans()
            if seconds % refresh == 1 % refresh and (
                self.evaluation.active or self.view.policy.keeps_quality
            ):
                await self._refresh_quality()
            if task is not None and task.cancelling():
                # cancelled mid-call and the Redis client swallowed it (redis/redis-py#2028)
                raise asyncio.CancelledError
            for pool in self.dispatcher.pools.values():
                for replica in pool.replicas:
                    scraped = replica.scraped
                    self.metrics.backend(
                        replica.url,
                        in_flight=replica.in_flight,
                        queue_depth=scraped.queued,
                        kv_usage=scraped.kv_usage,
                        cache_hit_rate=scraped.cache_hit_rate,
                    )
            self.metrics.admin.synced(self.runtime_keys.sync_age())
            ledger = self.stores.ledger
            self.metrics.ledger_queue_depth(getattr(ledger, "queue_depth", 0))
            failures = getattr(ledger, "write_failures", 0)
            for _ in range(failures - failures_seen):
                self.metrics.ledger_write_failure()
            failures_seen = failures

    async def _refresh_quality(self) -> None:
        """Measured quality from the labels store into the gauges and into what routes with
        a quality target plan on (every replica reads the same labels)."""
        try:
            measured = await self.evaluation.refresh()
        except Exception as exc:
            log.warning("measured quality not refreshed: %s", exc)
            return
        self.live_stats.set_measured_quality(measured)

    def _report_spans(self) -> None:
        """The exporter thread's counts, as deltas, into the process's metrics."""
        if self.tracer is None:
            return
        counts = self.tracer.export_counts()
        seen = self._spans_reported
        self.metrics.trace_spans(*(now - before for now, before in zip(counts, seen, strict=True)))
        self._spans_reported = counts


def start_tracing(env: Mapping[str, str]) -> Tracer | None:
    """The tracer the environment asks for; a request for what the gateway cannot do
    (`gateway serve` refuses it before starting) leaves tracing off, said once."""
    try:
        return open_tracer(env)
    except TracingConfigError as error:
        log.error("tracing is off: %s", error)
        return None


# Objects allocated per request before the cyclic collector's first generation runs. The
# default (700) ran it more than once per request; each pass costs the same whether it
# finds garbage or not, and a request's objects are nearly all freed by reference count.
YOUNG_GENERATION_THRESHOLD = 20000


def settle_the_heap() -> None:
    """Once a serving process has started: collect start-up garbage, move every object
    left (imports, settings, tokenizer tables: most of the heap) out of the collector's
    view, so full collections no longer walk it, and run the young generation less often.
    Measured on the non-stream bench, 16 in flight: ~5% of the CPU per request."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)
