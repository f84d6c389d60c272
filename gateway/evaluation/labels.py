"""The records the evaluation room stores: one label per request id and metric, and a
short note per answered request of an opted-in tenant (what feedback is checked against)."""

from __future__ import annotations

import msgspec

# the metric the judge's verdicts are stored under
JUDGED = "judged"


class Label(msgspec.Struct, frozen=True, kw_only=True):
    """How good one answered request was. A judged label compares the served answer with
    the reference model's answer to the same conversation (`served_quality` +
    `reference_quality` = 1: each answer's share of the two verdicts, a tie half); a
    feedback label is the application's own value, scaled to 0-1, with no reference."""

    request_id: str
    metric: str
    source: str  # "judge" or "feedback"
    tenant: str
    route: str
    served_model: str
    kind: str
    time: float
    served_quality: float
    reference_quality: float | None = None
    reference_model: str = ""
    judge_model: str = ""
    # the judge's verdicts, reference shown first then served shown first ("" : none)
    verdicts: tuple[str, str] = ("", "")
    # the last user turn, kept only where the logging settings allow; its hash always
    prompt: str = ""
    prompt_sha256: str = ""
    prompt_chars: int = 0
    turns: int = 0
    # Decimals as strings: the served answer's cost, the reference answer's cost, and
    # what the evaluation (reference + judge calls) cost
    served_cost_usd: str = ""
    reference_cost_usd: str = ""
    evaluation_cost_usd: str = ""
    # the sampling rate the request was drawn at: one label stands for 1/rate requests
    sample_rate: float = 1.0
    # True: the reference served the client, and `served_model` is a cheaper candidate
    # that answered the same conversation only to be measured (shadow evaluation; its
    # answer reached no client). `served_cost_usd` is then the candidate's cost.
    shadow: bool = False


class RequestNote(msgspec.Struct, frozen=True, kw_only=True):
    """An answered request of an opted-in tenant, kept so that feedback about it can be
    checked (the tenant made it) and labelled with its route, model and kind."""

    request_id: str
    tenant: str
    route: str
    served_model: str
    kind: str
    time: float
    prompt: str = ""
    prompt_sha256: str = ""
    prompt_chars: int = 0
    turns: int = 0
    served_cost_usd: str = ""


_label_decoder = msgspec.json.Decoder(Label)
_note_decoder = msgspec.json.Decoder(RequestNote)


def encode(record: Label | RequestNote) -> bytes:
    return msgspec.json.encode(record)


def decode_label(data: bytes | str) -> Label:
    return _label_decoder.decode(data)


def decode_note(data: bytes | str) -> RequestNote:
    return _note_decoder.decode(data)
