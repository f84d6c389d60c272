"""Routes and rules.

A route is a virtual model name (`auto`, `auto-cheap`, `best`) with a strategy over a pool
of models. Rules (a top-level `rules:` list in a policy file) are evaluated in order for
every request; each `when` that matches applies its `then`, and `last: true` stops the
evaluation after that rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import time
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.settings.base import Strict
from gateway.settings.evaluation import EvaluationSettings
from gateway.settings.response_cache import CacheSettings

Strategy = Literal["cheapest", "quality", "weighted", "ordered", "latency", "learned", "measured"]
# what a route with a `quality_target` serves while it has no measured quality for the
# model it would send a request to: its `reference` (the default: it never claims a saving
# it has not measured), or its strategy's choice on the shipped prior (`prior`; still
# reported `unmeasured`, so evaluation can measure the cheaper model)
Unmeasured = Literal["reference", "prior"]
# strategies that choose by quality and so may keep a quality target
QUALITY_KEEPING: frozenset[str] = frozenset({"learned", "measured"})
# how a `learned` route orders its pool when it has no score (scorer saturated or unloaded)
FallbackStrategy = Literal["cheapest", "quality", "ordered", "latency"]

_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


# two_tier: the score picks the strong or the cheap tier by `threshold`;
# cheapest_above: each model's predicted quality, the cheapest that clears `target` first
LearnedChoice = Literal["two_tier", "cheapest_above"]


class LearnedSettings(Strict):
    """The `learned` strategy: a shipped model scores each request's probability that the
    strong tier is needed. `choice: two_tier` (the default): at or above `threshold` the
    strong tier goes first, below it the cheap tier; within a tier, the cheapest eligible
    model leads. `choice: cheapest_above`: per-model quality heads turn the score into
    each model's predicted quality (through the judged model it `stand_ins` for) and the
    cheapest model whose prediction reaches `target` leads, the rest follow by cost."""

    # a shipped scorer by name (gateway/routing/learned/weights/NAME.bin) or a file path
    scorer: str = "ngram-v1"
    strong: list[str] = Field(min_length=1)
    cheap: list[str] = Field(min_length=1)
    choice: LearnedChoice = "two_tier"
    # two_tier only (and required there)
    threshold: float | None = Field(default=None, ge=0, le=1)
    # what `gateway route calibrate` set the threshold for, kept for the reader
    calibrated_for: str | None = None
    # cheapest_above only: the predicted quality a model must reach to go first
    target: float | None = Field(default=None, ge=0, le=1)
    # cheapest_above: shipped quality heads by name (weights/NAME.json) or a file path
    quality: str = "judged-v1"
    # cheapest_above: route model -> the judged model whose head predicts it
    stand_ins: dict[str, str] = Field(default_factory=dict)
    # the ordering used when no score is available
    fallback_strategy: FallbackStrategy = "cheapest"
    # strategy `measured` only: request kind -> threshold, for the kinds where the
    # scorer's own out-of-fold evidence showed it helps (`route train --from-labels`
    # prints them); a kind no cheaper model clears sends prompts scoring below its
    # threshold to the cheapest `cheap` model, the rest to the reference
    kinds: dict[str, float] = Field(default_factory=dict)

    @field_validator("kinds")
    @classmethod
    def _kind_thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [kind for kind, threshold in value.items() if not 0 <= threshold <= 1]
        if bad:
            raise ValueError(f"kinds: a threshold is from 0 to 1 ({', '.join(bad)})")
        return value

    @model_validator(mode="after")
    def _tiers_disjoint(self) -> LearnedSettings:
        both = sorted(set(self.strong) & set(self.cheap))
        if both:
            raise ValueError(f"models in both tiers: {', '.join(both)}")
        return self

    @model_validator(mode="after")
    def _choice_fields(self) -> LearnedSettings:
        if self.choice == "two_tier":
            # `threshold` is checked by the route: a `measured` route's block has `kinds`
            extra = [k for k in ("target", "stand_ins") if k in self.model_fields_set]
            if extra:
                raise ValueError(f"{', '.join(extra)} only apply to `choice: cheapest_above`")
        else:
            if self.target is None:
                raise ValueError("choice `cheapest_above` needs `target` (a quality, 0-1)")
            if not self.stand_ins:
                raise ValueError(
                    "choice `cheapest_above` needs `stand_ins` (route model -> judged model)"
                )
            if self.threshold is not None:
                raise ValueError("`threshold` only applies to `choice: two_tier`")
        return self

    @property
    def tier_threshold(self) -> float:
        """The two-tier threshold (validated present for two_tier routes)."""
        assert self.threshold is not None, "validated: two_tier routes have a threshold"
        return self.threshold


class RouteSettings(Strict):
    strategy: Strategy = "ordered"
    # model aliases considered, in priority order (ordered) or as the pool (others)
    models: list[str] = Field(min_length=1)
    # weighted: traffic share per model, same order as `models`
    weights: list[float] | None = None
    sticky: bool = False
    task_class: str = "general"
    min_quality: float | None = Field(default=None, ge=0, le=1)
    max_cost_usd: Decimal | None = Field(default=None, ge=0)
    fallbacks: list[str] = Field(default_factory=list)
    # wait up to this long for rate-limit tokens instead of refusing at once
    queue_ms: int = Field(0, ge=0)
    # output tokens assumed for expected cost when neither the request's max_tokens nor
    # the route's recent median is known; unset: each model's default or max output
    expected_output_tokens: int | None = Field(default=None, ge=1)
    # required by strategy `learned`; with strategy `measured`, the per-kind refinement
    learned: LearnedSettings | None = None
    # the share (0, 1] of the `reference` model's judged quality this route keeps, at the
    # lower bound of the measured interval (strategies `learned` and `measured`)
    quality_target: float | None = Field(default=None, gt=0, le=1)
    # the catalog model whose answers quality is judged against (one of `models`)
    reference: str | None = None
    # read only with a quality_target
    unmeasured: Unmeasured = "reference"
    # exact-match response cache for this route (off unless set)
    cache: CacheSettings | None = None
    # online evaluation of this route's answers (docs/evaluation.md); a tenant opts in
    evaluation: EvaluationSettings | None = None

    @model_validator(mode="after")
    def _quality_target(self) -> RouteSettings:
        if self.strategy == "measured" and (self.quality_target is None or self.reference is None):
            raise ValueError("strategy `measured` needs `quality_target` (0-1] and `reference`")
        if self.quality_target is not None:
            if self.strategy not in QUALITY_KEEPING:
                raise ValueError(
                    f"quality_target: strategy `{self.strategy}` does not choose by quality; "
                    "use `measured` (or `learned`)"
                )
            if self.reference is None:
                raise ValueError("quality_target needs `reference` (the model judged against)")
            if self.reference not in self.models:
                raise ValueError(
                    f"reference: '{self.reference}' must be one of the route's `models` (it "
                    "serves what no cheaper model measurably keeps the target on)"
                )
        return self

    @model_validator(mode="after")
    def _learned_block(self) -> RouteSettings:
        if self.strategy == "learned" and self.learned is None:
            raise ValueError("strategy `learned` needs a `learned:` block (tiers, threshold)")
        if self.strategy not in QUALITY_KEEPING and self.learned is not None:
            raise ValueError("a `learned:` block needs `strategy: learned` (or `measured`)")
        if self.learned is not None and self.strategy == "learned":
            if self.learned.kinds:
                raise ValueError("learned.kinds: per-kind thresholds need `strategy: measured`")
            if self.learned.choice == "two_tier" and self.learned.threshold is None:
                raise ValueError("choice `two_tier` needs `threshold`")
        if self.learned is not None and self.strategy == "measured":
            if self.learned.choice != "two_tier" or not self.learned.kinds:
                raise ValueError(
                    "a `measured` route's `learned:` block refines kinds: it needs `kinds` "
                    "(kind -> threshold, from `gateway route train --from-labels`)"
                )
            if self.reference not in self.learned.strong:
                raise ValueError("learned.strong: a `measured` route's strong tier is `reference`")
        if self.learned is not None:
            tiers = [*self.learned.strong, *self.learned.cheap]
            outside = [m for m in tiers if m not in self.models]
            if outside:
                raise ValueError(f"learned tiers name models not in `models`: {', '.join(outside)}")
            unknown = [m for m in self.learned.stand_ins if m not in self.models]
            if unknown:
                raise ValueError(
                    f"learned stand_ins name models not in `models`: {', '.join(unknown)}"
                )
        return self

    @field_validator("weights")
    @classmethod
    def _weights_positive(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (any(w < 0 for w in value) or not any(w > 0 for w in value)):
            raise ValueError("weights must be >= 0 with at least one above 0")
        return value


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class TimeWindow(Strict):
    """A UTC clock window `HH:MM-HH:MM`; the end is exclusive and may wrap past midnight."""

    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> TimeWindow:
        parts = text.split("-")
        if len(parts) != 2 or not all(_CLOCK.match(p.strip()) for p in parts):
            raise ValueError(f"expected 'HH:MM-HH:MM' (UTC), got {text!r}")
        start, end = (time.fromisoformat(p.strip()) for p in parts)
        return cls(start=start, end=end)

    def contains(self, moment: time) -> bool:
        if self.start <= self.end:
            return self.start <= moment < self.end
        return moment >= self.start or moment < self.end


class RuleWhen(Strict):
    """Every condition given must hold (AND); an empty `when` matches every request."""

    tenant: list[str] | None = None
    key: list[str] | None = None
    # the route (or model) name the request is on when the rule is evaluated
    route: list[str] | None = None
    # header name -> exact value; names are matched case-insensitively
    headers: dict[str, str] | None = None
    has_tools: bool | None = None
    has_images: bool | None = None
    json_mode: bool | None = None
    prompt_tokens_above: int | None = Field(default=None, ge=0)
    prompt_tokens_below: int | None = Field(default=None, ge=1)
    max_tokens_above: int | None = Field(default=None, ge=0)
    max_tokens_below: int | None = Field(default=None, ge=1)
    # Python regex, searched (not fully matched) in the last user message
    last_user_message_matches: str | None = None
    time_of_day: TimeWindow | None = None
    budget_used_above: float | None = Field(default=None, ge=0, le=1)

    @field_validator("tenant", "key", "route", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return _as_list(value)

    @field_validator("headers")
    @classmethod
    def _lower_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else {k.lower(): v for k, v in value.items()}

    @field_validator("last_user_message_matches")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regular expression: {exc}") from exc
        return value

    @field_validator("time_of_day", mode="before")
    @classmethod
    def _parse_window(cls, value: Any) -> Any:
        return TimeWindow.parse(value) if isinstance(value, str) else value


class RuleThen(Strict):
    """What a matching rule changes. Quality floor and cost cap are set (a later rule or a
    header override may set them again); models and providers lists accumulate."""

    task_class: str | None = None
    min_quality: float | None = Field(default=None, ge=0, le=1)
    max_cost_usd: Decimal | None = Field(default=None, ge=0)
    # models added to the route's pool, after its own models
    include_models: list[str] = Field(default_factory=list)
    exclude_models: list[str] = Field(default_factory=list)
    # when set, only deployments on these providers stay candidates
    only_providers: list[str] | None = None
    exclude_providers: list[str] = Field(default_factory=list)
    # switch the request to this route (or concrete model)
    route: str | None = None

    @model_validator(mode="after")
    def _does_something(self) -> RuleThen:
        if not self.model_fields_set:
            raise ValueError("a rule's `then` must change at least one thing")
        return self


class RuleSettings(Strict):
    name: str | None = None
    when: RuleWhen = Field(default_factory=RuleWhen)
    then: RuleThen
    # stop evaluating the rules after this one when it matches
    last: bool = False

    def label(self, index: int) -> str:
        return self.name or f"rules[{index}]"


def rule_reference_problems(
    rules: Iterable[RuleSettings],
    *,
    model_names: set[str],
    route_names: set[str],
    provider_names: set[str],
    tenant_names: set[str],
    key_ids: set[str],
    where: str,
) -> list[str]:
    """Names a rule refers to that the policy and config do not define.

    `model_names` holds every model name and alias. Kept here, free of the Policy type, so
    the loader's cross-check can call it without an import cycle.
    """
    problems: list[str] = []
    routable = model_names | route_names
    for i, rule in enumerate(rules):
        at = f"{where}: rules[{i}]"
        checks: list[tuple[str, Iterable[str], set[str], str]] = [
            ("when.tenant", rule.when.tenant or [], tenant_names, "tenant"),
            ("when.key", rule.when.key or [], key_ids, "key id"),
            ("when.route", rule.when.route or [], routable, "route or model"),
            ("then.include_models", rule.then.include_models, model_names, "model"),
            ("then.exclude_models", rule.then.exclude_models, model_names, "model"),
            ("then.only_providers", rule.then.only_providers or [], provider_names, "provider"),
            ("then.exclude_providers", rule.then.exclude_providers, provider_names, "provider"),
            ("then.route", [rule.then.route] if rule.then.route else [], routable, "route"),
        ]
        for path, names, known, kind in checks:
            for name in names:
                if name not in known:
                    problems.append(f"{at}.{path}: unknown {kind} '{name}'")
    return problems
