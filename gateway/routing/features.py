"""What the planner knows about a request: extracted once from the body and headers.

Prompt tokens are counted with cl100k (see `gateway.tokens`): exact for GPT-4-class
models, an approximation for the others, which is good enough to rank candidates by
expected cost; providers report real usage afterwards. The serving path counts before
planning, off the event loop for large prompts (`gateway.tokens.PromptCounter`), and
stops at `counting_limit`: past the largest context window nothing can serve the
request, and the planner refuses it whatever the exact count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

import msgspec

from gateway.errors import InvalidRequest
from gateway.settings.policy import Policy
from gateway.tokens import count_prompt
from gateway.wire.openai import ChatRequest, ImagePart

ROUTE_HEADER = "x-gateway-route"
MIN_QUALITY_HEADER = "x-gateway-min-quality"
MAX_COST_HEADER = "x-gateway-max-cost-usd"

# rules' regexes see the start of the last user message: enough to classify a request,
# and a bound on the time a pattern can take on a 500 KB prompt
RULE_TEXT_CHARS = 16_384

# credentials never travel further than authentication
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})


class Overrides(msgspec.Struct, frozen=True):
    """Per-request routing overrides sent as headers; honoured only for tenants allowed."""

    route: str | None = None
    min_quality: float | None = None
    max_cost_usd: Decimal | None = None

    def __bool__(self) -> bool:
        return (
            self.route is not None or self.min_quality is not None or self.max_cost_usd is not None
        )


class StrongScore(msgspec.Struct, frozen=True):
    """What the learned scorer said about a request, computed before planning (off the
    event loop) and handed to the pure planner. `score` is None when there is none,
    and `problem` says why (`saturated`, `unavailable`, `failed`)."""

    scorer: str
    score: float | None
    problem: str | None = None
    # `cheapest_above` routes: route model (as the route names it) -> its predicted
    # quality, read off `score` by the route's quality heads
    predicted: Mapping[str, float] = msgspec.field(default_factory=dict)
    # a versioned scorer (`redis:ROUTE`) carries its own calibrated threshold: a promoted
    # version replaces weights and threshold together
    threshold: float | None = None


class RequestFeatures(msgspec.Struct, frozen=True):
    requested: str
    prompt_tokens: int
    max_tokens: int | None = None
    has_tools: bool = False
    has_images: bool = False
    json_mode: bool = False
    json_schema: bool = False
    stream: bool = False
    # the first RULE_TEXT_CHARS characters of the last user message
    last_user_message: str = ""
    user: str | None = None
    tenant: str | None = None
    key_id: str | None = None
    # lower-case names; credentials removed
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)
    overrides: Overrides = Overrides()
    # drives weighted choices; the caller passes a per-request value: the seed itself, or
    # a text (the serving path's request id) whose stable hash is the seed, made only when
    # a plan draws on it (`draw_seed`)
    seed: int | str = 0
    # set only for requests planned on a `learned` route
    strong_score: StrongScore | None = None
    # the request kind (code, math, extraction, writing, chat, other) for routes with a
    # quality target; the runtime sets it (evaluation's kind classifier, a seam the
    # serving path fills); None: the route looks up its `all`-kinds measurement
    request_kind: str | None = None

    @property
    def required_capabilities(self) -> frozenset[str]:
        needed = set()
        if self.has_tools:
            needed.add("tools")
        if self.has_images:
            needed.add("vision")
        if self.json_schema:
            needed.add("json_schema")
        if self.stream:
            needed.add("streaming")
        return frozenset(needed)

    def sticky_seed(self) -> int:
        """A seed that stays the same for one end user: their `user` field, else the key."""
        return self.draw_seed(sticky=True).value

    def draw_seed(self, *, sticky: bool) -> Seed:
        """The seed of this request's weighted draws: per end user on a sticky route
        (`sticky_seed`), else per request."""
        identity = (self.user or self.key_id) if sticky else None
        return Seed(self.seed if identity is None else identity)


class Seed:
    """A plan's seed for its weighted draws, made on the first draw: the hash of a request
    id (SHA-256) costs more instructions than a plan's own ordering, and most plans draw
    nothing (models of one deployment, strategies other than `weighted`, no quality
    guard). An int is the seed itself; a text is hashed (`stable_hash`) to one."""

    __slots__ = ("_text", "_value")

    def __init__(self, source: int | str) -> None:
        self._text = "" if isinstance(source, int) else source
        self._value: int | None = source if isinstance(source, int) else None

    @property
    def value(self) -> int:
        value = self._value
        if value is None:
            value = self._value = stable_hash(self._text)
        return value


def stable_hash(text: str) -> int:
    """A process-independent 64-bit hash (Python's `hash` is salted per process)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def counting_limit(policy: Policy) -> int | None:
    """Where a prompt count may stop: past the largest context window in the catalog (and
    past every prompt-size rule threshold) no decision changes with the exact figure."""
    limits = [model.context_window for model in policy.models.values()]
    for rule in policy.rules:
        limits += (v for v in (rule.when.prompt_tokens_above, rule.when.prompt_tokens_below) if v)
    return max(limits) if limits else None


def extract_features(
    request: ChatRequest,
    headers: Mapping[str, str],
    *,
    tenant: str | None,
    key_id: str | None,
    seed: int | str,
    prompt_tokens: int | None = None,
) -> RequestFeatures:
    """Features of one request. Raises InvalidRequest for a malformed override header.

    `seed`: the seed of the request's weighted draws, or a text hashed to it when a plan
    first draws (`Seed`); the same text draws alike in every process.

    `prompt_tokens` is the count made before (off the event loop, see
    `gateway.tokens.PromptCounter`); without it the prompt is counted here."""
    lowered = {
        name: value
        for key, value in headers.items()
        if (name := key.lower()) not in _SECRET_HEADERS
    }
    response_type = request.response_format.type if request.response_format else "text"
    return RequestFeatures(
        requested=request.model,
        prompt_tokens=count_prompt(request) if prompt_tokens is None else prompt_tokens,
        max_tokens=request.output_limit,
        has_tools=bool(request.tools),
        has_images=_has_images(request),
        json_mode=response_type in ("json_object", "json_schema"),
        json_schema=response_type == "json_schema",
        stream=request.stream,
        last_user_message=_last_user_message(request),
        user=request.user,
        tenant=tenant,
        key_id=key_id,
        headers=lowered,
        overrides=parse_overrides(lowered),
        seed=seed,
    )


def parse_overrides(headers: Mapping[str, str]) -> Overrides:
    """The override headers of a request (names already lower-case)."""
    if (
        ROUTE_HEADER not in headers
        and MIN_QUALITY_HEADER not in headers
        and MAX_COST_HEADER not in headers
    ):
        return _NO_OVERRIDES  # nearly every request
    route = headers.get(ROUTE_HEADER, "").strip() or None
    return Overrides(
        route=route,
        min_quality=_quality_header(headers.get(MIN_QUALITY_HEADER)),
        max_cost_usd=_cost_header(headers.get(MAX_COST_HEADER)),
    )


_NO_OVERRIDES = Overrides()


def _quality_header(raw: str | None) -> float | None:
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise InvalidRequest(
            f"{MIN_QUALITY_HEADER} must be a number from 0 to 1, got {raw!r}",
            param=MIN_QUALITY_HEADER,
        )
    return value


def _cost_header(raw: str | None) -> Decimal | None:
    if raw is None or not raw.strip():
        return None
    try:
        value = Decimal(raw.strip())
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value < 0:
        raise InvalidRequest(
            f"{MAX_COST_HEADER} must be a non-negative number of US dollars, got {raw!r}",
            param=MAX_COST_HEADER,
        )
    return value


def _has_images(request: ChatRequest) -> bool:
    # a plain loop: a generator's frame resumed per message cost more than the test
    for message in request.messages:
        content = message.content
        if isinstance(content, list) and any(isinstance(part, ImagePart) for part in content):
            return True
    return False


def _last_user_message(request: ChatRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text()[:RULE_TEXT_CHARS]
    return ""
