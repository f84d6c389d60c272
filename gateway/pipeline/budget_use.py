"""How much of its budgets each tenant had used at its latest admission in this process:
written by the admit stage, read by the plan stage for budget downgrades (a soft signal:
the admission itself is what enforces a budget)."""

from __future__ import annotations

from gateway.routing.state import TenantState


class BudgetUse:
    def __init__(self) -> None:
        self._used: dict[str, float] = {}

    def saw(self, tenant_id: str, used_fraction: float) -> None:
        self._used[tenant_id] = used_fraction

    def state_of(self, tenant_id: str) -> TenantState:
        used = self._used.get(tenant_id)
        return TenantState() if used is None else TenantState(budget_used_fraction=used)
