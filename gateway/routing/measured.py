"""Quality as the gateway measured it on a tenant's own traffic: the shared shape that the
evaluation room produces (from judged labels) and routing consumes (quality targets, the
`measured` strategy). Pure data: nothing here reads a store or a clock."""

from __future__ import annotations

from dataclasses import dataclass

# a request kind that covers every kind (a route's or model's whole traffic)
ALL_KINDS = "all"


@dataclass(frozen=True)
class MeasuredQuality:
    """One served model's judged quality against its route's reference model on one kind of
    request: `ratio` = sum of the served answers' judged quality / sum of the reference
    answers' (each pair judged in both orders; a win 1, a tie 0.5, a loss 0), so 1.0 means
    "as good as the reference" on this traffic, with its 95% interval [low, high]."""

    route: str
    model: str
    kind: str
    ratio: float
    low: float
    high: float
    samples: int

    def clears(self, target: float) -> bool:
        """True when even the interval's lower bound keeps the quality target."""
        return self.samples > 0 and self.low >= target
