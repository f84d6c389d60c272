"""Shadow evaluation: which cheaper model measures itself on a request its route's
reference served. A route that keeps a quality target serves its reference until a
cheaper model is measured, and a reference-served request judged against the reference
is a tie with itself: so such a request is also answered by one candidate, off the
client's time, and the candidate's answer is judged against the reference's real one.

The candidates are the route's models priced below the reference whose measurement on
the request's kind has the fewest samples (none counts as zero); the request id picks
one of them, so every candidate gets measured over time and every replica agrees."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from decimal import Decimal

from gateway.routing.measured import MeasuredQuality


def shadow_candidates(
    route: str,
    kind: str,
    reference: str,
    models: Sequence[str],
    list_price: Mapping[str, Decimal],
    measured: Mapping[tuple[str, str, str], MeasuredQuality],
) -> tuple[str, ...]:
    """The route's models (canonical names) cheaper than `reference` by list price whose
    measurement on `kind` has the fewest samples, in the route's order."""
    ceiling = list_price.get(reference)
    cheaper = [
        model
        for model in dict.fromkeys(models)
        if model != reference
        and model in list_price
        and (ceiling is None or list_price[model] < ceiling)
    ]
    if not cheaper:
        return ()

    def samples(model: str) -> int:
        found = measured.get((route, model, kind))
        return found.samples if found is not None else 0

    fewest = min(samples(model) for model in cheaper)
    return tuple(model for model in cheaper if samples(model) == fewest)


def pick(candidates: Sequence[str], request_id: str) -> str:
    """One candidate, drawn by the request id (the same on every replica and retry)."""
    digest = hashlib.sha256(f"shadow:{request_id}".encode()).digest()
    return candidates[int.from_bytes(digest[:8], "big") % len(candidates)]
