"""Keeping a route's quality target with quality measured on its own traffic: pure rules
over `MeasuredQuality` (evaluation/ measures it; the runtime hands it in through
`LiveStats.measured_quality`), so every replica that sees the same measurements plans
the same way.

Two rules live here:

- `choose_measured` (strategy `measured`): each request kind goes to the cheapest model
  whose measured interval's *lower bound* clears the target; a kind with no such model
  goes to the reference (`unmeasured` when no model has a measurement for it). A trained
  per-prompt score refines a kind only where the route's `learned.kinds` gives it a
  threshold (written by `route train --from-labels` only for kinds where the score's own
  out-of-fold APGR interval sits above prompt length and a coin): prompts scoring below
  it go to the cheapest `cheap` model, unless that model's live measured ratio on the
  kind has fallen below the target.
- `guard` (a `learned` route with a `quality_target`): when the live measured ratio of
  the model the strategy chose falls below the target, a share of its traffic moves to
  the reference, exactly the share that brings the mix back to the target:
  (target - ratio) / (1 - ratio), drawn by the request's seed; with no measurement, the
  reference serves (`unmeasured: reference`, the default) or the strategy's choice does
  (`unmeasured: prior`), and either way the route says `unmeasured`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.routing.features import stable_hash
from gateway.routing.measured import ALL_KINDS, MeasuredQuality
from gateway.settings.routes import Unmeasured

_TWO_TO_64 = float(2**64)

# (route, served model, kind) -> its measured quality against the route's reference
MeasuredTable = Mapping[tuple[str, str, str], MeasuredQuality]

GuardStatus = Literal["reference", "measured", "unmeasured", "below-target"]


@dataclass(frozen=True)
class Keeping:
    """A route's quality target and what was measured on it, for one request."""

    route: str
    target: float
    # canonical catalog name
    reference: str
    # the request's kind (code, math, ...); ALL_KINDS when no classifier said
    kind: str
    unmeasured: Unmeasured
    measured: MeasuredTable

    def of(self, model: str) -> MeasuredQuality | None:
        """The model's measurement on this request's kind (with at least one sample)."""
        found = self.measured.get((self.route, model, self.kind))
        return found if found is not None and found.samples > 0 else None


def kind_of(request_kind: str | None) -> str:
    return request_kind or ALL_KINDS


@dataclass(frozen=True)
class Guard:
    status: GuardStatus
    # True: the reference leads instead of the strategy's choice
    to_reference: bool
    # the share of the chosen model's traffic moved to the reference
    reference_share: float
    measured: MeasuredQuality | None = None

    def reason(self) -> str:
        """`measured-0.962`, `unmeasured-reference`, `below-target-0.912-to-reference`."""
        if self.status == "reference":
            return "reference"
        if self.status == "unmeasured":
            return "unmeasured-reference" if self.to_reference else "unmeasured-prior"
        assert self.measured is not None, "measured statuses carry their measurement"
        ratio = f"{self.measured.ratio:.3f}"
        if self.status == "measured":
            return f"measured-{ratio}"
        moved = "to-reference" if self.to_reference else "kept"
        return f"below-target-{ratio}-share-{self.reference_share:.2f}-{moved}"


def reference_share(ratio: float, target: float) -> float:
    """The share of a model's traffic to move to the reference (ratio 1 by definition) so
    that the mix's ratio reaches the target: s + (1 - s) * ratio = target."""
    if ratio >= target:
        return 0.0
    if ratio >= 1.0:
        return 0.0
    return min(1.0, max(0.0, (target - ratio) / (1.0 - ratio)))


def guard(chosen: str, keeping: Keeping, seed: int) -> Guard:
    """Whether the reference should serve instead of `chosen` (the strategy's first)."""
    if chosen == keeping.reference:
        return Guard("reference", False, 0.0)
    measured = keeping.of(chosen)
    if measured is None:
        to_reference = keeping.unmeasured == "reference"
        return Guard("unmeasured", to_reference, 1.0 if to_reference else 0.0)
    share = reference_share(measured.ratio, keeping.target)
    if share == 0.0:
        return Guard("measured", False, 0.0, measured)
    draw = (stable_hash(f"{seed}:quality-guard") + 0.5) / _TWO_TO_64
    return Guard("below-target", draw < share, share, measured)


@dataclass(frozen=True)
class Refinement:
    """A `measured` route's per-prompt refinement of one kind: the request's score, the
    kind's threshold, and the canonical names of the cheap tier."""

    score: float
    threshold: float
    cheap: frozenset[str]


@dataclass(frozen=True)
class MeasuredChoice:
    """The model that leads, the status the route reports, and the header-safe reason."""

    model: str
    status: GuardStatus
    reason: str


def choose_measured(
    by_cost: Sequence[str], keeping: Keeping, refinement: Refinement | None = None
) -> MeasuredChoice:
    """`by_cost`: the eligible models (canonical), cheapest first. The reference leads
    when no cheaper model's lower bound clears the target (or the reference is not
    eligible: then the cheapest measured-below model leads and the status says so)."""
    kind, target = keeping.kind, keeping.target
    cheaper = [m for m in by_cost if m != keeping.reference]
    for model in cheaper:
        measured = keeping.of(model)
        if measured is not None and measured.clears(target):
            return MeasuredChoice(
                model, "measured", f"measured-{kind}-{model}-low-{measured.low:.3f}"
            )
    if refinement is not None:
        refined = _refined(cheaper, keeping, refinement)
        if refined is not None:
            return refined
    any_measured = any(keeping.of(m) is not None for m in cheaper)
    status: GuardStatus = "below-target" if any_measured else "unmeasured"
    if keeping.reference in by_cost:
        return MeasuredChoice(keeping.reference, status, f"measured-{kind}-{status}-reference")
    # the reference cannot serve this request (context, capabilities): the cheapest left
    fallback = cheaper[0] if cheaper else keeping.reference
    return MeasuredChoice(fallback, status, f"measured-{kind}-{status}-no-reference")


def _refined(
    cheaper: Sequence[str], keeping: Keeping, refinement: Refinement
) -> MeasuredChoice | None:
    """The cheap model for a prompt scoring below the kind's threshold, or None (the
    reference) when it scores at or above it, or the cheap model's live ratio on this
    kind has fallen below the target."""
    kind = keeping.kind
    cheap = next((m for m in cheaper if m in refinement.cheap), None)
    score, threshold = refinement.score, refinement.threshold
    if cheap is None or score >= threshold:
        return None
    live = keeping.of(cheap)
    if live is not None and live.ratio < keeping.target:
        return None
    # measured either live or, before any live sample, out of fold on the route's labels
    evidence = "labels" if live is None else f"live-{live.ratio:.3f}"
    return MeasuredChoice(
        cheap,
        "measured",
        f"measured-{kind}-refined-score-{score:.3f}-below-{threshold:.3f}-{cheap}-{evidence}",
    )
