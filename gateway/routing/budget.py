"""Budget downgrade: above a fraction of its budget a tenant moves to a cheaper route
instead of being refused."""

from __future__ import annotations

from msgspec.structs import replace

from gateway.routing.decision import Decision
from gateway.routing.features import RequestFeatures
from gateway.routing.state import TenantState
from gateway.settings.policy import Policy
from gateway.settings.tenants import BudgetSettings


def apply_budget_downgrade(
    decision: Decision, policy: Policy, features: RequestFeatures, tenant_state: TenantState
) -> Decision:
    """Switch to the first downgrade route (key budgets first, then the tenant's) whose
    threshold the used fraction has reached."""
    used = tenant_state.budget_used_fraction
    for budget in _budgets(policy, features):
        if budget.downgrade_fraction is None or budget.downgrade_route is None:
            continue
        if used < budget.downgrade_fraction:
            continue
        note = (
            f"budget {used:.0%} used, downgrade at {budget.downgrade_fraction:.0%}: "
            f"route {decision.route_name} -> {budget.downgrade_route}"
        )
        if decision.route_name != budget.downgrade_route:
            decision = decision.on_route(policy, budget.downgrade_route)
        return replace(decision, downgraded=True).noted(note)
    return decision


def _budgets(policy: Policy, features: RequestFeatures) -> list[BudgetSettings]:
    tenant = policy.tenants.get(features.tenant) if features.tenant is not None else None
    if tenant is None:
        return []
    budgets: list[BudgetSettings] = []
    key_id = features.key_id
    for key in tenant.keys:
        if key.id == key_id:
            budgets += key.budgets
    budgets += tenant.budgets
    return budgets
