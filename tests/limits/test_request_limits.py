"""Which limits a request touches, built from the policy settings (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.limits import RequestLimits, expected_tokens, plan_admission
from gateway.limits.redis_keys import hash_tag
from gateway.limits.request_limits import AdmissionTemplate, limit_owners
from gateway.limits.spec import usd_to_micros
from gateway.settings.catalog import DeploymentSettings, ModelSettings, RateLimitSettings
from gateway.settings.tenants import BudgetSettings, KeySettings, TenantSettings

NOW = datetime(2026, 11, 30, 23, 59, 30, tzinfo=UTC)


def limits_for(
    *,
    tenant: TenantSettings | None = None,
    key_limits: RateLimitSettings | None = None,
    key_budgets: list[BudgetSettings] | None = None,
    model_limits: RateLimitSettings | None = None,
    deployment_limits: RateLimitSettings | None = None,
    tenant_id: str = "acme",
) -> RequestLimits:
    key = KeySettings(
        id="k1", hash="sha256:" + "a" * 64, limits=key_limits, budgets=key_budgets or []
    )
    deployment = DeploymentSettings(
        provider="openai", upstream_model="gpt-4.1", limits=deployment_limits
    )
    return RequestLimits(
        request_id="req-1",
        tenant_id=tenant_id,
        tenant=tenant or TenantSettings(keys=[key]),
        key=key,
        model_alias="gpt-4.1",
        model=ModelSettings(deployments=[deployment], limits=model_limits),
        expected_tokens=1200,
        worst_case_cost_usd=Decimal("0.0123"),
        deployment_id="openai-main",
        deployment=deployment,
    )


def test_each_owner_gets_requests_and_tokens_buckets_with_burst_as_capacity() -> None:
    plan = plan_admission(
        limits_for(
            key_limits=RateLimitSettings(
                requests_per_minute=60, tokens_per_minute=6000, tokens_burst=9000
            ),
            tenant=TenantSettings(limits=RateLimitSettings(requests_per_minute=600)),
            deployment_limits=RateLimitSettings(tokens_per_minute=1_000_000),
        ),
        now=NOW,
    )
    summary = [(b.scope, b.kind, b.capacity, b.refill_per_second, b.amount) for b in plan.buckets]
    assert summary == [
        ("key k1", "requests", 60, 1.0, 1),
        ("key k1", "tokens", 9000, 100.0, 1200),
        ("tenant acme", "requests", 600, 10.0, 1),
        ("deployment openai-main", "tokens", 1_000_000, 1_000_000 / 60, 1200),
    ]


def test_tenant_model_limits_replace_the_models_default() -> None:
    tenant = TenantSettings(model_limits={"gpt-4.1": RateLimitSettings(requests_per_minute=5)})
    own = plan_admission(
        limits_for(tenant=tenant, model_limits=RateLimitSettings(requests_per_minute=50)),
        now=NOW,
    )
    default = plan_admission(
        limits_for(model_limits=RateLimitSettings(requests_per_minute=50)), now=NOW
    )
    assert [b.capacity for b in own.buckets] == [5]
    assert [b.capacity for b in default.buckets] == [50]
    assert own.buckets[0].scope == "model gpt-4.1 for tenant acme"


def test_tenant_state_shares_one_hash_tag_and_deployment_state_another() -> None:
    everything = RateLimitSettings(requests_per_minute=10, tokens_per_minute=10, max_concurrent=3)
    plan = plan_admission(
        limits_for(
            tenant=TenantSettings(limits=everything, budgets=[BudgetSettings(usd=Decimal(5))]),
            key_limits=everything,
            model_limits=everything,
            deployment_limits=everything,
            tenant_id="we{ir}d",
        ),
        now=NOW,
    )
    keys = [
        *(b.key for b in plan.buckets),
        *(x.key for x in plan.leases),
        *(g.key for g in plan.budgets),
    ]
    assert len(keys) == len(set(keys)) == 8 + 4 + 1
    assert {hash_tag(key) for key in keys} == {"t:we%7Bir%7Dd", "d:openai-main"}
    assert [lease.scope for lease in plan.leases] == [
        "key k1",
        "tenant we{ir}d",
        "model gpt-4.1 for tenant we{ir}d",
        "deployment openai-main",
    ]
    assert {lease.limit for lease in plan.leases} == {3}


def test_calendar_budgets_are_keyed_by_utc_period_and_end_with_it() -> None:
    plan = plan_admission(
        limits_for(
            tenant=TenantSettings(budgets=[BudgetSettings(usd=Decimal(100), period="month")]),
            key_budgets=[
                BudgetSettings(usd=Decimal(10), period="day"),
                BudgetSettings(usd=Decimal(3), period="day"),
                BudgetSettings(usd=Decimal(1), period="rolling", rolling_seconds=3600),
            ],
        ),
        now=NOW,
    )
    budgets = {g.key.split(":budget:")[1]: g for g in plan.budgets}
    assert set(budgets) == {"key:k1:day:2026-11-30", "key:k1:rolling:3600", "tenant:month:2026-11"}
    # two day budgets on one key count the same spend: the tighter one applies
    assert budgets["key:k1:day:2026-11-30"].limit_usd == Decimal(3)
    assert budgets["key:k1:day:2026-11-30"].period_end == int(
        datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    )
    assert budgets["tenant:month:2026-11"].period_end == int(
        datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    )
    assert budgets["key:k1:rolling:3600"].window_seconds == 3600
    assert all(g.amount_usd == Decimal("0.0123") for g in plan.budgets)


def test_no_limits_configured_means_an_empty_admission() -> None:
    plan = plan_admission(limits_for(), now=NOW)
    assert (plan.buckets, plan.leases, plan.budgets) == ((), (), ())


def test_expected_tokens_reserve_the_prompt_and_the_most_the_reply_may_use() -> None:
    model = ModelSettings(
        deployments=[DeploymentSettings(provider="p", upstream_model="m")],
        max_output_tokens=4096,
        default_max_tokens=1000,
    )
    assert expected_tokens(500, None, model) == 1500
    assert expected_tokens(500, 200, model) == 700
    assert expected_tokens(500, 100_000, model) == 500 + 4096


def test_a_kept_template_plans_what_plan_admission_plans_across_periods() -> None:
    """The Admitter keeps one AdmissionTemplate per scope: each request's plan must be the
    one plan_admission would make then, also when a day or month ends between requests
    (and when the clock steps back)."""
    request = limits_for(
        tenant=TenantSettings(budgets=[BudgetSettings(usd=Decimal(100), period="month")]),
        key_limits=RateLimitSettings(
            requests_per_minute=60, tokens_per_minute=6000, max_concurrent=2
        ),
        key_budgets=[
            BudgetSettings(usd=Decimal(10), period="day"),
            BudgetSettings(usd=Decimal(1), period="rolling", rolling_seconds=3600),
        ],
        model_limits=RateLimitSettings(tokens_per_minute=9000),
        deployment_limits=RateLimitSettings(requests_per_minute=600, max_concurrent=5),
    )
    template = AdmissionTemplate(limit_owners(request.scope, "gw"))
    moments = [
        NOW,
        NOW + timedelta(seconds=29),  # the last second of November
        NOW + timedelta(seconds=30),  # December 1st, 00:00:00: a new day and month
        NOW + timedelta(days=1),
        NOW,  # the clock stepped back
    ]
    for index, moment in enumerate(moments):
        tokens, cost = 1000 + index, Decimal("0.0123") * (index + 1)
        built = template.build(
            f"req-{index}", expected_tokens=tokens, worst_case_cost_usd=cost, now=moment.timestamp()
        )
        planned = plan_admission(
            replace(
                request, request_id=f"req-{index}", expected_tokens=tokens, worst_case_cost_usd=cost
            ),
            now=moment,
        )
        assert built == planned
        assert all(g.amount_micros == usd_to_micros(cost) for g in built.budgets)
    labels = {
        g.key.split(":budget:")[1]
        for g in template.build(
            "r", expected_tokens=1, worst_case_cost_usd=Decimal(0), now=moments[2].timestamp()
        ).budgets
    }
    assert labels == {"key:k1:day:2026-12-01", "key:k1:rolling:3600", "tenant:month:2026-12"}
