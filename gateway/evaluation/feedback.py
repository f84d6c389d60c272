"""An application's feedback on one of its requests (`POST /v1/feedback`), checked
against the metrics the policy declares before anything is stored:

    {"request_id": "...", "metric": "thumbs_up", "value": true}

An unknown metric, a value of the wrong type or out of the metric's range, and a missing
field are refused naming the field (`param`); the label is the metric's value scaled to
0-1, attached to the request's route, served model and kind from its note."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gateway.evaluation.labels import Label, RequestNote
from gateway.settings.evaluation import FeedbackMetricSettings


class FeedbackRefused(ValueError):
    """Bad feedback; `param` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def read_feedback(
    body: Any, metrics: Mapping[str, FeedbackMetricSettings]
) -> tuple[str, str, float]:
    """(request id, metric, value scaled to 0-1) from a decoded JSON body."""
    if not isinstance(body, dict):
        raise FeedbackRefused("The body must be a JSON object.", "body")
    request_id = body.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise FeedbackRefused(
            "'request_id' is required: the x-request-id of an answer.", "request_id"
        )
    metric = body.get("metric")
    if not isinstance(metric, str) or not metric:
        raise FeedbackRefused("'metric' is required: a metric the policy declares.", "metric")
    declared = metrics.get(metric)
    if declared is None:
        known = ", ".join(sorted(metrics)) or "none are declared (policy `feedback_metrics:`)"
        raise FeedbackRefused(f"Unknown metric '{metric}'; known metrics: {known}.", "metric")
    if "value" not in body:
        raise FeedbackRefused("'value' is required.", "value")
    value = body["value"]
    if declared.type == "boolean":
        if not isinstance(value, bool):
            raise FeedbackRefused(
                f"Metric '{metric}' takes a boolean value (true or false).", "value"
            )
        return request_id, metric, 1.0 if value else 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FeedbackRefused(f"Metric '{metric}' takes a number.", "value")
    if not declared.min <= value <= declared.max:
        raise FeedbackRefused(
            f"Metric '{metric}' takes a number from {declared.min:g} to {declared.max:g}.", "value"
        )
    span = declared.max - declared.min
    return request_id, metric, (float(value) - declared.min) / span if span else 1.0


def feedback_label(note: RequestNote, metric: str, value: float, now: float) -> Label:
    return Label(
        request_id=note.request_id,
        metric=metric,
        source="feedback",
        tenant=note.tenant,
        route=note.route,
        served_model=note.served_model,
        kind=note.kind,
        time=now,
        served_quality=value,
        prompt=note.prompt,
        prompt_sha256=note.prompt_sha256,
        prompt_chars=note.prompt_chars,
        turns=note.turns,
        served_cost_usd=note.served_cost_usd,
    )
