"""How much of its budgets each tenant had used at its latest admission in this process:
written by the admit stage, read by the plan stage for budget downgrades (a soft signal:
the admission itself is what enforces a budget)."""

from __future__ import annotations

from gateway.routing.state import TenantState


class BudgetUse:
    def __init__(self) -> None:
        self._used: dict[str, float] = {}
        # the state last handed out per tenant: immutable, so shared until its fraction
        # changes (a frozen dataclass built per request cost a setattr per field)
        self._states: dict[str, TenantState] = {}

    def saw(self, tenant_id: str, used_fraction: float) -> None:
        self._used[tenant_id] = used_fraction

    def state_of(self, tenant_id: str) -> TenantState:
        used = self._used.get(tenant_id)
        if used is None:
            return _NONE_USED
        state = self._states.get(tenant_id)
        if state is None or state.budget_used_fraction != used:
            state = self._states[tenant_id] = TenantState(budget_used_fraction=used)
        return state


_NONE_USED = TenantState()
