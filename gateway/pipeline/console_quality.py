"""The console's Quality page facts: per route, what online evaluation measured, led by
"saved $X against always-<reference> at measured quality Y% [lo, hi]" (or `unmeasured`),
then each served model and request kind (docs/evaluation.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.admin.console_pages import QualityPage, RouteQuality
from gateway.evaluation.quality import QualityRow, headline
from gateway.routing.measured import ALL_KINDS

if TYPE_CHECKING:
    from gateway.pipeline.runtime import GatewayRuntime


async def quality_page(runtime: GatewayRuntime) -> QualityPage:
    problems: list[str] = []
    rows: list[QualityRow] = []
    try:
        rows = await runtime.evaluation.quality_rows()
    except Exception as exc:
        problems.append(f"labels: the store did not answer ({type(exc).__name__})")
    policy = runtime.view.policy
    references = {
        name: route.evaluation.reference or ""
        for name, route in policy.routes.items()
        if route.evaluation is not None
    }
    names = sorted(set(references) | {row.quality.route for row in rows})
    routes = []
    for name in names:
        own = [row for row in rows if row.quality.route == name]
        whole = next((row for row in own if row.quality.model == ALL_KINDS), None)
        reference = whole.reference_model if whole is not None else references.get(name, "")
        routes.append(
            RouteQuality(
                name,
                headline(whole, reference),
                whole is not None,
                [row.as_json() for row in sorted(own, key=_whole_first)],
            )
        )
    return QualityPage(routes, problems)


def _whole_first(row: QualityRow) -> tuple[bool, str, bool, str]:
    q = row.quality
    return (q.model != ALL_KINDS, q.model, q.kind != ALL_KINDS, q.kind)
