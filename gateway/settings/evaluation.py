"""Online evaluation (docs/evaluation.md): which answered requests are also answered by a
reference model and judged, and the feedback metrics an application may report.

`evaluation:` on a route says how its traffic is evaluated; a tenant opts in with its own
`evaluation:` block (off by default), whose keys win over the route's. Both reference and
judge must be catalog models (checked at load). The process-wide queue lives in the
server config (`evaluation:` there: queue size, workers, label retention).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import Field, model_validator

from gateway.settings.base import Strict


class EvaluationSettings(Strict):
    # the share of answered requests evaluated (1.0: every one, for tests and trials)
    sample_rate: float | None = Field(default=None, ge=0, le=1)
    # the model every sampled answer is compared with, and the model that compares them
    reference: str | None = None
    judge: str | None = None
    # evaluation spend per tenant and UTC day; once reached, evaluation stops until the
    # next day (counted in gateway_evaluation_dropped_total{reason="daily_cap"})
    daily_usd: Decimal | None = Field(default=None, gt=0)
    # whose ledger records (and budget) the reference and judge calls are charged to:
    # the evaluated request's tenant (unset), or the named tenant
    charge_to: str | None = None
    # the reference answer's token cap
    max_tokens: int | None = Field(default=None, ge=1)


# what an evaluation block resolves to when neither the route nor the tenant says
DEFAULT_SAMPLE_RATE = 0.05
DEFAULT_DAILY_USD = Decimal("5")
DEFAULT_MAX_TOKENS = 1024


class FeedbackMetricSettings(Strict):
    """A metric `POST /v1/feedback` accepts: a boolean (a thumbs-up) or a float in
    [min, max] (stored scaled to 0-1, so every label reads as a quality)."""

    type: Literal["boolean", "float"]
    min: float = 0.0
    max: float = 1.0

    @model_validator(mode="after")
    def _range(self) -> FeedbackMetricSettings:
        if self.max <= self.min:
            raise ValueError(f"max ({self.max:g}) must be above min ({self.min:g})")
        return self


class EvaluationQueueSettings(Strict):
    """The server config's `evaluation:` block: one bounded queue per process."""

    # sampled answers waiting for their reference and judge calls; a full queue drops
    # (gateway_evaluation_dropped_total{reason="queue_full"})
    queue_size: int = Field(256, ge=1)
    # evaluations run at once per process
    workers: int = Field(2, ge=1, le=64)
    # labels and request notes are kept this long, and at most this many (per store)
    label_ttl_days: int = Field(90, ge=1)
    max_labels: int = Field(100_000, ge=100)
    # how often measured quality is recomputed from the labels (gauges, quality targets,
    # strategy `measured`): a new label moves routing within about this long
    refresh_seconds: int = Field(15, ge=1, le=3600)
    # with store.kind redis, sampled jobs are journalled in Redis until finished, so a
    # crashed process's jobs are run by another (docs/evaluation.md). A job holds the
    # conversation and the served answer: unset, the journal is on only where content may
    # be kept (server.log_content: true); true keeps them in Redis for the job's life
    # even without it; false keeps jobs in memory only (lost, counted, on a stop)
    journal: bool | None = None
    # a held job whose holder has not renewed it for this long is claimed by another
    journal_lease_seconds: float = Field(30.0, ge=0.1, le=3600)
    # a job handed to a worker this many times without finishing is given up (counted)
    max_attempts: int = Field(3, ge=1, le=100)
    # jobs the journal holds at most (the oldest unfinished are trimmed, counted)
    journal_max_jobs: int = Field(10_000, ge=10)


def evaluation_problems(
    blocks: list[tuple[str, EvaluationSettings | None]],
    *,
    chat_models: set[str],
    tenants: set[str],
    where: str,
) -> list[str]:
    """Names an `evaluation:` block refers to that the policy does not define, as
    `file: routes.NAME.evaluation.KEY: ...` (kept free of the Policy type: no cycle)."""
    problems: list[str] = []
    for path, block in blocks:
        if block is None:
            continue
        at = f"{where}: {path}.evaluation"
        for key, name in (("reference", block.reference), ("judge", block.judge)):
            if name is not None and name not in chat_models:
                known = ", ".join(sorted(chat_models)) or "none"
                problems.append(
                    f"{at}.{key}: '{name}' is not a chat model in the catalog (models: {known})"
                )
        if block.charge_to is not None and block.charge_to not in tenants:
            problems.append(f"{at}.charge_to: unknown tenant '{block.charge_to}'")
        if path.startswith("routes.") and (block.reference is None or block.judge is None):
            missing = " and ".join(
                k for k, v in (("reference", block.reference), ("judge", block.judge)) if v is None
            )
            problems.append(f"{at}: a route's evaluation needs {missing}")
    return problems
