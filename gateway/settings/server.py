"""The server config file (`config/*.yaml`): listener, store, providers, policy files."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from gateway.settings.base import Strict
from gateway.settings.evaluation import EvaluationQueueSettings
from gateway.settings.response_cache import ResponseCacheStoreSettings


class ConnectionLimits(Strict):
    """What the HTTP server allows one client connection (`server.connections`): slow or
    idle clients are closed, so none can hold a connection (a file descriptor) forever."""

    # from a request's first byte to the end of its headers (slowloris dribbles them)
    header_timeout_seconds: float = Field(10.0, gt=0)
    # the longest pause between two reads of a request body
    body_idle_timeout_seconds: float = Field(30.0, gt=0)
    # the whole body, from the end of the headers (a body dribbled just faster than the
    # idle timeout is cut off here); 32 MB at 1 Mbit/s takes about 270 s
    body_timeout_seconds: float = Field(300.0, gt=0)
    # an open connection with no request in progress (before the first one too)
    keep_alive_timeout_seconds: float = Field(5.0, gt=0)
    # open client connections per worker; past it new ones get a 503 and are closed. It
    # is also held under the open-files limit (two descriptors per connection: the client
    # and its upstream), so the gateway never runs out of descriptors
    max_connections: int = Field(10_000, ge=1)
    # the request line and every header name and value, added up
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    max_headers: int = Field(100, ge=8)


class ListenSettings(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    # 32 MiB: large enough for a few base64 images, small enough to refuse abuse
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    # JSON nested deeper than this is refused with a 400 (real requests nest < 20 levels)
    max_json_depth: int = Field(128, ge=8, le=10_000)
    shutdown_grace_seconds: float = Field(30.0, ge=0)
    # sha256:<hex> of the admin key, for admin endpoints
    admin_key_hash: str | None = None
    # dev mode: human-readable logs
    log_format: Literal["json", "text"] = "json"
    # message content in access logs: off unless a deployment needs it for debugging or
    # for a labelling sample (`gateway route label --from-access-log`)
    log_content: bool = False
    # the share of requests whose content is logged when log_content is on: a small share
    # can stay on to collect a sample of traffic without logging all of it
    log_content_share: float = Field(1.0, gt=0, le=1)
    # tenant ids as metric labels (bounded by the number of configured tenants)
    metrics_tenant_labels: bool = True
    connections: ConnectionLimits = ConnectionLimits()

    @model_validator(mode="after")
    def _share_needs_content(self) -> ListenSettings:
        if self.log_content_share < 1 and not self.log_content:
            raise ValueError("log_content_share does nothing unless log_content is true")
        return self


class StoreSettings(Strict):
    kind: Literal["memory", "redis"] = "memory"
    redis_url: SecretStr | None = None
    # a Redis round trip takes well under a millisecond; the rest of this budget covers
    # a busy worker's event loop reading the reply late under a burst
    timeout_ms: int = Field(250, ge=1)
    on_failure: Literal["fail_open", "fail_closed"] = "fail_open"
    # far from a key's limits, admit a client's next request ahead, off the request
    # path, so it goes upstream without waiting for Redis (docs/limits-and-budgets.md,
    # "Admission ahead"); false: every request waits for its own admission
    admission_grants: bool = True
    key_prefix: str = "gw"
    # None: ask the server (INFO cluster) at start
    cluster: bool | None = None
    # after a failure, skip Redis this long before probing it again
    probe_interval_seconds: float = Field(1.0, gt=0)
    # where ledger records wait on disk when Redis is down and the queue is full
    spill_dir: str | None = None
    ledger_queue_size: int = Field(10_000, ge=1)
    # the Redis ledger's stream of records (the console's recent requests, spend over part
    # days or several filters) keeps a record until it is older than this or about
    # ledger_stream_max_records newer ones follow it, whichever comes first. Spend over
    # whole UTC days comes from day counters (400 days) and month counters (3 years)
    # whatever the stream keeps. Each record is ~580 bytes of Redis: the default count
    # bound is ~580 MB, reached in 5.5 minutes at 3,000 requests a second, in 4.6 hours
    # at 60; the age bound is the one that trims below 0.37 requests a second
    ledger_stream_retention_seconds: int = Field(31 * 86_400, ge=1)
    # approximate: Redis trims whole stream nodes (100 records each by default), so the
    # stream holds up to about 100 more; below 1,000 that slack would be over 10%
    ledger_stream_max_records: int = Field(1_000_000, ge=1_000)
    # the in-memory store's ledger keeps this many recent records (for spend over part
    # days); spend over whole days stays exact beyond them, from per-day totals
    memory_ledger_records: int = Field(10_000, ge=1)
    # how often each process asks Redis whether runtime keys changed (one GET): a revoked
    # key is refused everywhere within about this long
    runtime_keys_poll_ms: int = Field(100, ge=10, le=5000)

    @model_validator(mode="after")
    def _redis_needs_url(self) -> StoreSettings:
        if self.kind == "redis" and self.redis_url is None:
            raise ValueError("store.kind redis needs redis_url (e.g. redis://127.0.0.1:6379/0)")
        return self


class ConversationSettings(Strict):
    """Stored Responses-API conversations (`store: true`, `previous_response_id`): kept
    in Redis when `store.kind` is redis, in memory otherwise."""

    # OpenAI keeps stored responses 30 days
    ttl_seconds: int = Field(30 * 24 * 3600, ge=1)
    # one stored response with its conversation; a larger one is not stored (the
    # response says so in `x-gateway-store`)
    max_record_bytes: int = Field(1024 * 1024, ge=1024)
    # the in-memory store's bound on records (oldest dropped first)
    memory_max_records: int = Field(10_000, ge=1)


class Timeouts(Strict):
    connect: float = Field(5.0, gt=0)
    read: float = Field(120.0, gt=0)
    # only the httpx transport bounds writes on their own
    write: float = Field(30.0, gt=0)
    pool: float = Field(10.0, gt=0)
    # the whole time a request may spend on this provider, retries and their waits
    # included; for a stream, until the upstream's answer starts
    total: float = Field(600.0, gt=0)


class ConnectionPool(Strict):
    # above the concurrent streams one worker can hold; each is one upstream connection
    max_connections: int = Field(4096, ge=1)
    max_keepalive_connections: int = Field(256, ge=0)
    keepalive_expiry: float = Field(30.0, ge=0)


class RetrySettings(Strict):
    max_attempts: int = Field(3, ge=1)
    base_delay_seconds: float = Field(0.1, ge=0)
    max_delay_seconds: float = Field(5.0, ge=0)
    # no retry starts later than this after the request's first attempt on the provider
    deadline_seconds: float = Field(60.0, gt=0)
    # Chat completions are not idempotent in general (a timed-out generation may have
    # run, and been billed); retrying them is usually what users want, so it is on
    # unless turned off. Off, only failures the upstream surely did no work for are
    # retried: a refused connection, a 429.
    retry_non_idempotent: bool = True


class BreakerSettings(Strict):
    """Consecutive failed requests (or an error rate) eject a deployment for
    `open_seconds` x the number of consecutive ejections (at most `max_open_seconds`);
    half-open lets `half_open_probes` trials through, doubling per success, and closes
    after `half_open_successes`. A 429 sets the deployment aside for its retry-after
    (else `cooldown_seconds`). See gateway/resilience/breaker.py."""

    failure_threshold: int = Field(5, ge=1)
    window_seconds: float = Field(30.0, gt=0)
    error_rate: float = Field(0.5, gt=0, le=1)
    min_requests: int = Field(10, ge=1)
    open_seconds: float = Field(10.0, gt=0)
    max_open_seconds: float = Field(300.0, gt=0)
    half_open_probes: int = Field(1, ge=1)
    half_open_successes: int = Field(3, ge=1)
    cooldown_seconds: float = Field(1.0, ge=0)
    max_cooldown_seconds: float = Field(60.0, ge=0)
    # when every candidate of a request is ejected or cooling down: send it to the one
    # ejected first anyway (panic, Envoy's term), or answer 503 with retry-after
    when_all_open: Literal["panic", "fail_fast"] = "panic"
    # state in Redis (store.kind: redis), so every replica sees every ejection
    shared: bool = False
    # how often a shared breaker reads the state other replicas wrote
    sync_seconds: float = Field(0.2, gt=0)

    @model_validator(mode="after")
    def _ordered_bounds(self) -> BreakerSettings:
        if self.max_open_seconds < self.open_seconds:
            raise ValueError("max_open_seconds must be at least open_seconds")
        if self.max_cooldown_seconds < self.cooldown_seconds:
            raise ValueError("max_cooldown_seconds must be at least cooldown_seconds")
        return self


GpuClass = Literal["v100", "a100", "h100"]

OFFICIAL_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}


class ReplicaPoolSettings(Strict):
    """A GPU pool: several replicas of one OpenAI-compatible server (SGLang, vLLM,
    llama.cpp's llama-server)."""

    urls: list[str] = Field(min_length=1)
    balancer: Literal["round_robin", "least_load", "prefix_affinity"] = "prefix_affinity"
    gpu_class: GpuClass | None = None
    max_inflight_per_replica: int | None = Field(None, ge=1)
    queue_size: int = Field(1024, ge=0)
    queue_timeout_ms: int = Field(30_000, ge=0)
    scrape_interval_seconds: float = Field(2.0, gt=0)
    # the backend kind, for its `/metrics` names (and llama.cpp's `/slots`: its slot count
    # becomes the in-flight cap unless max_inflight_per_replica is set)
    metrics_style: Literal["sglang", "vllm", "llamacpp", "none"] = "sglang"
    health_path: str = "/health"
    # prefix_affinity leaves a prefix's favourite replica when it is overloaded: its load
    # exceeds the least loaded one's by more than `abs` AND by more than `rel` times, or its
    # KV cache is fuller than `kv`. Unset, `abs` is a quarter of the replica's in-flight
    # cap (at least 1), so that it can trigger under the cap (SGLang's router uses 64)
    balance_abs_threshold: int | None = Field(None, ge=0)
    balance_rel_threshold: float = Field(1.5, ge=1)
    balance_kv_threshold: float = Field(0.95, gt=0, le=1)


class ProviderSettings(Strict):
    kind: Literal["openai", "anthropic", "gemini"]
    base_url: str = ""
    # the HTTP client under the transport seam (see gateway/providers/transport.py)
    transport: Literal["http1", "aiohttp", "httpx"] = "http1"
    api_key: SecretStr | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: Timeouts = Timeouts()
    pool: ConnectionPool = ConnectionPool()
    retry: RetrySettings = RetrySettings()
    breaker: BreakerSettings = BreakerSettings()
    replicas: ReplicaPoolSettings | None = None
    anthropic_version: str = "2023-06-01"
    # client APIs besides chat completions that this upstream serves itself, so requests
    # in them pass through unconverted. SGLang and vLLM serve legacy completions (a GPU
    # pool gets it by default); OpenAI's chat models do not, so a plain OpenAI provider
    # gets completions translated to chat unless this says otherwise. OpenAI's own API
    # serves the Responses API (`responses`) by default; others are translated to chat.
    native_apis: list[Literal["completions", "responses"]] | None = None
    # most inputs one upstream embeddings call may carry (None: OpenAI 2048, Gemini 100)
    embedding_batch_size: int | None = Field(None, ge=1)
    # Anthropic: the `anthropic-beta` values a /v1/messages client sends are forwarded
    # as they came (Claude Code needs its betas for the fields it sends), except those
    # in `anthropic_betas_denied`; `anthropic_betas`, when set, forwards only those
    anthropic_betas: list[str] | None = None
    anthropic_betas_denied: list[str] = Field(default_factory=list)
    # a provider built-in tool a client asked for (Responses `web_search`) that this
    # upstream has no equivalent of: left out and said so ("drop"), or a 400 ("refuse")
    builtin_tools: Literal["drop", "refuse"] = "drop"
    # Anthropic: for OpenAI-format requests without cache_control, mark long system
    # prompts and tool lists as prompt-cache breakpoints ("auto") or never ("off")
    prompt_cache: Literal["auto", "off"] = "auto"

    @property
    def max_embedding_batch(self) -> int:
        if self.embedding_batch_size is not None:
            return self.embedding_batch_size
        return 100 if self.kind == "gemini" else 2048

    @model_validator(mode="before")
    @classmethod
    def _official_base_url(cls, data: Any) -> Any:
        """Without a base_url (and not a GPU pool), the provider's public API."""
        if isinstance(data, dict) and not data.get("base_url") and not data.get("replicas"):
            official = OFFICIAL_BASE_URLS.get(str(data.get("kind")))
            if official is not None:
                data = {**data, "base_url": official}
        return data

    @model_validator(mode="after")
    def _pool_speaks_openai(self) -> ProviderSettings:
        if self.replicas is not None and self.kind != "openai":
            raise ValueError(
                "replicas (a GPU pool) are for kind: openai servers (SGLang, vLLM, llama.cpp)"
            )
        if self.native_apis and self.kind != "openai":
            raise ValueError("native_apis lists OpenAI APIs: only kind: openai servers have them")
        return self

    def serves_natively(self, api: str) -> bool:
        """Whether this upstream serves the client API `api` ("completions", "responses")
        itself."""
        if self.native_apis is not None:
            return api in self.native_apis
        if api == "responses":
            official = OFFICIAL_BASE_URLS["openai"]
            return self.kind == "openai" and self.base_url.rstrip("/") == official
        return api == "completions" and self.replicas is not None

    def inert_settings(self, store_kind: str) -> list[str]:
        """Settings written in the file that change nothing (key path: why), so that
        `gateway check` can refuse them instead of letting an operator trust them."""
        found: list[str] = []
        retry, breaker, timeouts = self.retry, self.breaker, self.timeouts
        if retry.max_attempts == 1:
            for name in sorted(retry.model_fields_set - {"max_attempts"}):
                found.append(f"retry.{name}: does nothing with max_attempts 1 (no retries)")
        deadline_set = "deadline_seconds" in retry.model_fields_set
        if deadline_set and retry.deadline_seconds >= timeouts.total:
            found.append(
                f"retry.deadline_seconds: {retry.deadline_seconds} is not below "
                f"timeouts.total ({timeouts.total}), which ends the request first"
            )
        if "write" in timeouts.model_fields_set and self.transport != "httpx":
            found.append(
                f"timeouts.write: only the httpx transport bounds writes, not {self.transport}"
            )
        if "sync_seconds" in breaker.model_fields_set and not breaker.shared:
            found.append("breaker.sync_seconds: does nothing unless breaker.shared is true")
        if breaker.shared and store_kind != "redis":
            found.append("breaker.shared: needs store.kind redis to share anything through")
        return found


class DevSettings(Strict):
    """What `gateway dev` starts beside the gateway: one emulator per URL (each replica,
    or the base_url) of each provider named in `emulate`, on that URL's port."""

    emulate: list[str] = Field(default_factory=lambda: ["emulator"], min_length=1)
    emulator_args: list[str] = Field(default_factory=list)
    # printed at start so a first user can copy them (they are dev-only keys)
    print_key: str | None = None
    print_admin_key: str | None = None
    print_keys: dict[str, str] = Field(default_factory=dict)


class ServerConfig(Strict):
    server: ListenSettings = ListenSettings()
    store: StoreSettings = StoreSettings()
    conversations: ConversationSettings = ConversationSettings()
    response_cache: ResponseCacheStoreSettings = ResponseCacheStoreSettings()
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    # policy files, relative to the config file's folder
    policies: list[str] = Field(default_factory=list)
    dev: DevSettings | None = None
    evaluation: EvaluationQueueSettings = EvaluationQueueSettings()
