"""The one typed per-request context every stage reads and fills in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec

from gateway.admin.client_keys import Caller
from gateway.cache.recording import AnswerRecording
from gateway.evaluation.plans import EvaluationPlan
from gateway.limits import Admission, AdmissionRequest
from gateway.limits.request_limits import AdmissionTemplate
from gateway.observability.tracing import RequestTrace
from gateway.pipeline.policy_view import PolicyView
from gateway.settings.catalog import DeploymentSettings, ModelSettings
from gateway.tokens import PromptPieces
from gateway.usage import Usage
from gateway.wire.apis import OPENAI_CHAT
from gateway.wire.openai import ChatRequest


class ServingOption(msgspec.Struct, frozen=True):
    """One place the request may be served: a model on one deployment, with the settings
    the dispatcher needs (the planner's `routing.candidates.Candidate` resolved)."""

    model: str
    settings: ModelSettings
    deployment: DeploymentSettings
    reason: str = "requested"
    expected_cost: Decimal | None = None
    expected_output_tokens: int = 0
    # `deployment.key`, when the maker knew it (the planner does): the settings are a
    # pydantic model, and `key` reads three of its attributes, each through pydantic's
    # `__getattr__` hook, several times a request
    deployment_key: str | None = None

    @property
    def deployment_id(self) -> str:
        key = self.deployment_key
        return self.deployment.key if key is None else key


@dataclass(slots=True)
class Flow:
    request_id: str
    started: float
    created: int
    view: PolicyView
    # unique per request, minted by the gateway (request_id may be the client's own):
    # what the ledger writes each record once by
    record_id: str = ""
    # the client's API (an ingress codec's `api`)
    api: str = OPENAI_CHAT
    caller: Caller | None = None
    request: ChatRequest | None = None
    # the request as an OpenAI chat body, and as the client sent it in its own API
    raw: dict[str, Any] | None = None
    native: dict[str, Any] | None = None
    untranslatable: str | None = None
    translation_changes: tuple[str, ...] = ()
    builtin_tools: tuple[str, ...] = ()
    # called with the answer's last bytes (the whole body, or a stream's closing frames)
    # before they are sent, by a stage that must see the answer complete (the Responses
    # API stores it, so a follow-up sent the moment the client has it finds it)
    on_answer: Callable[[bytes], Awaitable[None]] | None = None
    requested_model: str = ""
    route: str = ""
    route_reason: str = ""
    # routes with a quality_target: measured / unmeasured / below-target / reference
    quality_status: str = ""
    # learned routes: the score (P(strong tier needed)), its threshold and the scorer
    route_score: float | None = None
    route_threshold: float | None = None
    route_scorer: str = ""
    candidates: list[ServingOption] = field(default_factory=list)
    served_by: ServingOption | None = None
    provider: str = ""
    attempts: int = 0
    retries: int = 0
    # candidates tried that failed and another was tried after ("model:cause"); set
    # aside untried ("model:reason"); every failed attempt, retries included
    # ("model:cause"); sent past open circuits
    fallback_from: list[str] = field(default_factory=list)
    # the candidate that failed last, until another is tried (then it is a fallback)
    failed_candidate: str | None = None
    skipped: list[str] = field(default_factory=list)
    failed_attempts: list[str] = field(default_factory=list)
    # what the gateway changed in the request the serving attempt sent (a clamped
    # max_tokens, a dropped beta, field or tool, a renamed namespace tool), said in
    # x-gateway-route as `changed=...`
    changes: list[str] = field(default_factory=list)
    panic: bool = False
    status: int = 0
    error_code: str | None = None
    # the refusal's message as the client got it (redacted), for the refusals view
    error_message: str | None = None
    usage: Usage | None = None
    cost: Decimal | None = None
    # the prompt's tokens, once counted (pipeline/prompt_size: only where a decision needs
    # them); `prompt_tokens_bound` is the cheap upper bound planned with instead
    prompt_tokens_estimate: int | None = None
    prompt_tokens_bound: int | None = None
    # what counting reads (gateway.tokens.prompt_pieces), kept for a count at admission
    prompt_pieces: PromptPieces | None = None
    upstream_started: float | None = None
    upstream_seconds: float = 0.0
    first_token_at: float | None = None
    finished: float | None = None
    client_disconnected: bool = False
    # the ledger has this request's record (recorded before the answer's last bytes went
    # out, so that a client holding a complete answer implies a durable record)
    spend_recorded: bool = False
    # request_started was recorded (in-flight gauge), so settle must close it
    counted_in_flight: bool = False
    # chunks sent to the client, and those with text in them (one token each, as
    # OpenAI-compatible servers stream): the output estimate when usage is missing
    streamed_chunks: int = 0
    content_chunks: int | None = None
    # text streamed that the upstream's usage does not count yet (an Anthropic stream
    # abandoned before its final message_delta): counted offline when it is priced
    unreported_text: str | None = None
    admission_request: AdmissionRequest | None = None
    admission: Admission | None = None
    # who limits this request (pipeline/admit), kept for its settlement, and what its
    # admission reserved for it (tokens, worst case in USD): under an admission made
    # ahead, what it needed, not what the grant holds
    admission_template: AdmissionTemplate | None = None
    admission_need: tuple[int, Decimal] | None = None
    # the response cache (pipeline/response_cache): what it did ("" when it does not
    # apply, else hit / miss / bypass), the answer being recorded for it on a miss, and
    # on a hit what the answer cost when it was first served
    cache_status: str = ""
    cache_recording: AnswerRecording | None = None
    cache_saved_usd: Decimal | None = None
    # online evaluation (pipeline/evaluation_stage): the plan when the tenant opted in,
    # and the answer being recorded when this request was sampled
    evaluation_plan: EvaluationPlan | None = None
    evaluation_recording: AnswerRecording | None = None
    # the ledger record's kind: "" for a client's request, "evaluation" for the gateway's
    # own reference and judge calls
    ledger_kind: str = ""
    # response headers collected by stages (rate limits, cost)
    headers: dict[str, str] = field(default_factory=dict)
    # what the stages note for the request's spans; None when tracing is off
    trace: RequestTrace | None = None

    def route_header(self) -> str:
        parts = [self.route or self.requested_model]
        if self.served_by is not None:
            parts.append(f"served={self.served_by.model}")
        reason = "panic" if self.panic else self.route_reason
        if reason:
            parts.append(f"reason={reason}")
        if self.fallback_from:
            parts.append("fallback-from=" + ",".join(self.fallback_from))
        if self.skipped:
            parts.append("skipped=" + ",".join(self.skipped))
        if self.failed_attempts:
            parts.append("attempts=" + ",".join(self.failed_attempts))
        if self.changes:
            parts.append("changed=" + ",".join(self.changes))
        return "; ".join(parts)
