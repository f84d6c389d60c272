"""When a retrained scorer may replace the one a route serves: a pure rule over
out-of-fold evidence on one set of labels (`gateway route retrain` computes it).

The candidate is promoted only when the lower bound of its APGR 95% interval (out of
fold) is above the APGR of the scorer the route serves now *and* above prompt length's,
both on the same labels. The current scorer's number is in-sample where it was trained
on some of those labels, which favours keeping it: a promotion is the harder call.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RouterEvidence:
    apgr: float
    low: float
    high: float


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str


def promotion_verdict(
    candidate: RouterEvidence, current: RouterEvidence | None, length: RouterEvidence
) -> Verdict:
    """`current` None: the route serves no scorer yet (only length must be beaten)."""
    if candidate.low != candidate.low:  # nan: no interval (no gain to recover)
        return Verdict(False, "the candidate has no APGR interval on these labels")
    bars = [("prompt length", length.apgr)]
    if current is not None:
        bars.append(("the current scorer", current.apgr))
    for name, apgr in bars:
        if not candidate.low > apgr:
            return Verdict(
                False,
                f"kept: the candidate's APGR interval low {candidate.low:.3f} does not beat "
                f"{name}'s APGR {apgr:.3f}",
            )
    beaten = " and ".join(f"{name} {apgr:.3f}" for name, apgr in bars)
    return Verdict(
        True,
        f"promoted: APGR {candidate.apgr:.3f} [{candidate.low:.3f}, {candidate.high:.3f}] "
        f"beats {beaten}",
    )
