from __future__ import annotations

from collections import Counter

from gateway.routing.balancing import (
    BalanceRequest,
    BoundedLoad,
    LeastLoad,
    PrefixAffinity,
    ReplicaView,
    RoundRobin,
    balance_request,
    build_balancer,
    eligible,
)
from gateway.routing.balancing.prefix_affinity import rendezvous_order
from gateway.settings.server import ReplicaPoolSettings
from gateway.wire.openai import ChatRequest, FunctionDefinition, Message, Tool

URLS = [f"http://gpu-{n}:30000/v1" for n in range(4)]
SYSTEM_PROMPTS = [f"You are assistant number {n}. " + "Be precise. " * (40 + n) for n in range(32)]


def idle_pool(urls: list[str] = URLS, limit: int = 40) -> list[ReplicaView]:
    return [ReplicaView(url=url, max_in_flight=limit) for url in urls]


def chat(system: str | None, user: str) -> ChatRequest:
    messages = [Message(role="user", content=user)]
    if system is not None:
        messages.insert(0, Message(role="system", content=system))
    return ChatRequest(model="llama", messages=messages)


def test_eligible_drops_unhealthy_open_and_full_replicas() -> None:
    replicas = [
        ReplicaView(url="a", max_in_flight=2),
        ReplicaView(url="b", max_in_flight=2, healthy=False),
        ReplicaView(url="c", max_in_flight=2, breaker_open=True),
        ReplicaView(url="d", max_in_flight=2, in_flight=2),
        ReplicaView(url="e", max_in_flight=2, in_flight=1),
    ]
    assert eligible(replicas) == [0, 4]


def test_requests_sharing_a_system_prompt_share_a_routing_key() -> None:
    first = balance_request(chat(SYSTEM_PROMPTS[3], "What is 2+2?"))
    second = balance_request(chat(SYSTEM_PROMPTS[3], "Write a haiku about rain, please." * 20))
    other = balance_request(chat(SYSTEM_PROMPTS[4], "What is 2+2?"))
    assert first.routing_key == second.routing_key
    assert first.routing_key != other.routing_key
    # the full prompts differ, so their deepest block hashes differ
    assert first.prefix_hashes[-1] != second.prefix_hashes[-1]


def test_a_short_system_prompt_is_still_its_own_key() -> None:
    first = balance_request(chat("Be terse.", "hello " * 100))
    second = balance_request(chat("Be terse.", "goodbye " * 100))
    assert first.anchor == 0
    assert first.routing_key == second.routing_key


def test_without_system_prompt_the_first_turn_is_the_key() -> None:
    opening = Message(role="user", content="Let us plan a trip to Lisbon. " * 5)
    one_turn = ChatRequest(model="m", messages=[opening])
    three_turns = ChatRequest(
        model="m",
        messages=[
            opening,
            Message(role="assistant", content="Sure."),
            Message(role="user", content="Which museums?"),
        ],
    )
    assert balance_request(one_turn).routing_key == balance_request(three_turns).routing_key


def test_prefix_hashes_stop_at_max_blocks() -> None:
    request = balance_request(chat("x" * 10_000, "y" * 10_000), block_chars=100, max_blocks=8)
    assert len(request.prefix_hashes) == 8
    assert request.anchor == 7


def test_same_prefix_goes_to_same_replica_across_independent_balancers() -> None:
    gateways = [PrefixAffinity(), PrefixAffinity(), PrefixAffinity()]
    # each gateway lists the replicas in its own order: placement must not depend on it
    orders = [URLS, list(reversed(URLS)), URLS[2:] + URLS[:2]]
    for system in SYSTEM_PROMPTS:
        chosen_urls = set()
        for gateway, urls in zip(gateways, orders, strict=True):
            pool = idle_pool(urls)
            for question in ("first question", "a different, longer question " * 9):
                index = gateway.select(pool, balance_request(chat(system, question)))
                assert index is not None
                chosen_urls.add(pool[index].url)
        assert len(chosen_urls) == 1, system


def test_prefix_affinity_spreads_distinct_prefixes_over_the_pool() -> None:
    balancer = PrefixAffinity()
    pool = idle_pool()
    counts = Counter(
        balancer.select(pool, balance_request(chat(system, "hi"))) for system in SYSTEM_PROMPTS
    )
    assert set(counts) == {0, 1, 2, 3}


def test_removing_a_replica_only_moves_the_prefixes_it_held() -> None:
    keys = [balance_request(chat(system, "hi")).routing_key for system in SYSTEM_PROMPTS]
    before = {key: URLS[rendezvous_order(key, URLS)[0]] for key in keys if key is not None}
    survivors = URLS[:3]
    after = {key: survivors[rendezvous_order(key, survivors)[0]] for key in before}
    moved = {key for key in before if before[key] != after[key]}
    assert moved == {key for key in before if before[key] == URLS[3]}


def test_prefix_affinity_leaves_a_replica_overloaded_beyond_both_bounds() -> None:
    balancer = PrefixAffinity(BoundedLoad(abs_threshold=4, rel_threshold=1.5))
    request = balance_request(chat(SYSTEM_PROMPTS[0], "hi"))
    pool = idle_pool()
    home = balancer.select(pool, request)
    assert home is not None
    second = rendezvous_order(request.routing_key or 0, URLS)[1]

    # 5 more than the least loaded, and more than 1.5x it: overloaded, spill to the 2nd
    loaded = [
        replica if i != home else ReplicaView(url=replica.url, max_in_flight=40, in_flight=5)
        for i, replica in enumerate(pool)
    ]
    assert balancer.select(loaded, request) == second

    # a gap within the absolute bound keeps the request home
    within_abs = [
        ReplicaView(url=r.url, max_in_flight=40, in_flight=4 if i == home else 0)
        for i, r in enumerate(pool)
    ]
    assert balancer.select(within_abs, request) == home

    # over the absolute bound but within the relative one: still home
    within_rel = [
        ReplicaView(url=r.url, max_in_flight=40, in_flight=14 if i == home else 10)
        for i, r in enumerate(pool)
    ]
    assert balancer.select(within_rel, request) == home


def test_prefix_affinity_counts_the_scraped_queue_as_load() -> None:
    balancer = PrefixAffinity()  # SGLang's 64 / 1.5
    request = balance_request(chat(SYSTEM_PROMPTS[5], "hi"))
    pool = idle_pool()
    home = balancer.select(pool, request)
    assert home is not None
    queued = [
        ReplicaView(url=r.url, max_in_flight=40, in_flight=1, queue_depth=80 if i == home else 0)
        for i, r in enumerate(pool)
    ]
    assert balancer.select(queued, request) != home


def test_prefix_affinity_avoids_a_replica_whose_kv_cache_is_exhausted() -> None:
    balancer = PrefixAffinity(BoundedLoad(kv_threshold=0.9))
    request = balance_request(chat(SYSTEM_PROMPTS[6], "hi"))
    pool = idle_pool()
    home = balancer.select(pool, request)
    full_cache = [
        ReplicaView(url=r.url, max_in_flight=40, kv_usage=0.97 if i == home else 0.3)
        for i, r in enumerate(pool)
    ]
    assert balancer.select(full_cache, request) != home
    every_cache_full = [ReplicaView(url=r.url, max_in_flight=40, kv_usage=0.97) for r in pool]
    assert balancer.select(every_cache_full, request) == home


def burst(
    balancer: PrefixAffinity, pool: list[ReplicaView], requests: list[BalanceRequest]
) -> list[int]:
    """Place `requests` one after another with none finishing (a burst's first instants),
    each placement adding to its replica's in-flight count; returns the loads."""
    loads = [replica.in_flight for replica in pool]
    for request in requests:
        views = [
            ReplicaView(url=r.url, max_in_flight=r.max_in_flight, in_flight=load)
            for r, load in zip(pool, loads, strict=True)
        ]
        index = balancer.select(views, request)
        assert index is not None
        loads[index] += 1
    return loads


def test_a_burst_of_one_hot_head_spreads_within_a_quarter_of_the_cap() -> None:
    """40 requests of one system prompt at once on 4 H100 replicas (cap 40 each): a fixed
    gap of 64 can never trigger under the cap, so the favourite took all 40 while three
    replicas idled. Scaled to the cap, no replica leads another by more than cap/4 + 1."""
    pool = idle_pool(limit=40)
    hot = [balance_request(chat(SYSTEM_PROMPTS[9], f"question {n}")) for n in range(40)]
    loads = burst(PrefixAffinity(), pool, hot)
    assert sum(loads) == 40
    assert max(loads) - min(loads) <= 40 // 4 + 1, loads
    # the head still starts at home: its favourite holds the most
    home = rendezvous_order(hot[0].routing_key or 0, URLS)[0]
    assert loads[home] == max(loads)


def test_the_spill_gap_is_a_quarter_of_the_cap_unless_fixed() -> None:
    bounds = BoundedLoad()
    assert [bounds.gap(ReplicaView(url="a", max_in_flight=cap)) for cap in (1, 4, 10, 40)] == [
        1,
        1,
        3,
        10,
    ]
    assert BoundedLoad(abs_threshold=64).gap(ReplicaView(url="a", max_in_flight=4)) == 64


def test_a_four_slot_favourite_keeps_a_lead_of_one_and_spills_at_two() -> None:
    balancer = PrefixAffinity()
    request = balance_request(chat(SYSTEM_PROMPTS[11], "hi"))
    ranking = rendezvous_order(request.routing_key or 0, URLS[:2])

    def with_home_load(load: int) -> list[ReplicaView]:
        return [
            ReplicaView(url=url, max_in_flight=4, in_flight=load if i == ranking[0] else 0)
            for i, url in enumerate(URLS[:2])
        ]

    assert balancer.select(with_home_load(1), request) == ranking[0]
    assert balancer.select(with_home_load(2), request) == ranking[1]


def test_a_full_favourite_spills_to_the_next_replica_in_rendezvous_order() -> None:
    balancer = PrefixAffinity()
    request = balance_request(chat(SYSTEM_PROMPTS[7], "hi"))
    ranking = rendezvous_order(request.routing_key or 0, URLS)
    pool = [
        ReplicaView(url=url, max_in_flight=4, in_flight=4 if i == ranking[0] else 0)
        for i, url in enumerate(URLS)
    ]
    assert balancer.select(pool, request) == ranking[1]


def test_every_policy_avoids_unhealthy_and_open_circuit_replicas() -> None:
    request = balance_request(chat(SYSTEM_PROMPTS[1], "hi"))
    home = PrefixAffinity().select(idle_pool(), request)
    assert home is not None
    sick = (home + 1) % len(URLS)
    pool = [
        ReplicaView(url=url, max_in_flight=40, breaker_open=(i == home), healthy=(i != sick))
        for i, url in enumerate(URLS)
    ]
    for balancer in (RoundRobin(), LeastLoad(), PrefixAffinity()):
        chosen = {balancer.select(pool, request) for _ in range(20)}
        assert chosen, balancer.name
        assert not chosen & {home, sick}, balancer.name


def test_every_policy_returns_none_when_nothing_is_eligible() -> None:
    pool = [ReplicaView(url=url, max_in_flight=1, in_flight=1) for url in URLS]
    for balancer in (RoundRobin(), LeastLoad(), PrefixAffinity()):
        assert balancer.select(pool, BalanceRequest()) is None


def test_round_robin_gives_each_replica_an_equal_turn() -> None:
    balancer = RoundRobin()
    pool = idle_pool()
    counts = Counter(balancer.select(pool, BalanceRequest()) for _ in range(400))
    assert counts == {0: 100, 1: 100, 2: 100, 3: 100}


def test_round_robin_skips_a_replica_that_became_full() -> None:
    balancer = RoundRobin()
    pool = idle_pool(limit=2)
    pool[1] = ReplicaView(url=pool[1].url, max_in_flight=2, in_flight=2)
    chosen = [balancer.select(pool, BalanceRequest()) for _ in range(9)]
    assert 1 not in chosen
    assert Counter(chosen) == {0: 3, 2: 3, 3: 3}


def test_least_load_picks_the_replica_with_fewest_requests_ahead() -> None:
    balancer = LeastLoad()
    pool = [
        ReplicaView(url="a", max_in_flight=40, in_flight=3, queue_depth=0),
        ReplicaView(url="b", max_in_flight=40, in_flight=1, queue_depth=5),
        ReplicaView(url="c", max_in_flight=40, in_flight=2, queue_depth=0),
    ]
    assert all(balancer.select(pool, BalanceRequest()) == 2 for _ in range(5))


def test_least_load_breaks_ties_by_kv_usage_then_rotates() -> None:
    balancer = LeastLoad()
    pool = [
        ReplicaView(url="a", max_in_flight=40, in_flight=2, kv_usage=0.8),
        ReplicaView(url="b", max_in_flight=40, in_flight=2, kv_usage=0.2),
        ReplicaView(url="c", max_in_flight=40, in_flight=5, kv_usage=0.0),
    ]
    assert balancer.select(pool, BalanceRequest()) == 1
    idle = idle_pool()
    assert {balancer.select(idle, BalanceRequest()) for _ in range(8)} == {0, 1, 2, 3}


def test_factory_builds_the_named_policy() -> None:
    for name in ("round_robin", "least_load", "prefix_affinity"):
        settings = ReplicaPoolSettings(urls=URLS, balancer=name)
        assert build_balancer(settings).name == name
    first = build_balancer(ReplicaPoolSettings(urls=URLS, balancer="round_robin"))
    second = build_balancer(ReplicaPoolSettings(urls=URLS, balancer="round_robin"))
    assert first is not second


def test_tool_definitions_are_part_of_the_head() -> None:
    tool = Tool(function=FunctionDefinition(name="lookup", parameters={"type": "object"}))
    plain = chat(SYSTEM_PROMPTS[0], "hi")
    with_tools = ChatRequest(model="llama", messages=plain.messages, tools=[tool])
    assert balance_request(plain).routing_key != balance_request(with_tools).routing_key


def test_pool_settings_set_the_prefix_affinity_bounds() -> None:
    from gateway.routing.balancing.factory import build_balancer
    from gateway.routing.balancing.prefix_affinity import BoundedLoad, PrefixAffinity
    from gateway.settings.server import ReplicaPoolSettings

    settings = ReplicaPoolSettings(
        urls=["http://a/v1", "http://b/v1"], balance_abs_threshold=10, balance_rel_threshold=1.2
    )
    balancer = build_balancer(settings)
    assert isinstance(balancer, PrefixAffinity)
    assert balancer.bounds == BoundedLoad(abs_threshold=10, rel_threshold=1.2, kv_threshold=0.95)
