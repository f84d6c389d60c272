"""Prefix affinity: requests that share a prompt head go where that head is cached.

How it chooses
--------------
1. The request's routing key is the hash of its prompt head (tools and system prompt, or
   the first user turn), see `prefix.py`: every request with one system prompt has one key.
2. Rendezvous (highest-random-weight) hashing ranks the eligible replicas for that key:
   score(replica) = blake2b(key, replica url), highest first. The first replica is the
   one that has served this head before, so its KV cache most likely still holds it.
3. Bounded load: walk that ranking and take the first replica that is not overloaded
   relative to the least loaded eligible one. Overloaded means both
   `load - min_load > gap` and `load > rel_threshold * min_load` (SGLang's cache-aware
   balance test), where load is our in-flight count plus the replica's scraped queue,
   or its scraped KV usage at or over `kv_threshold` while another eligible replica is
   under it (admitting more would preempt). The gap scales with the replica's in-flight
   cap: a quarter of it, at least 1 (H100's 40: 10; a 4-slot llama-server: 1), unless
   `abs_threshold` fixes it. See :class:`BoundedLoad` for why.
   Replicas at their in-flight limit are never eligible, so a full favourite spills to
   the *next replica in the same ranking*: the second home of a hot head is the same in
   every gateway too.
4. When every replica is full and requests wait in the pool's queue, a slot freed on a
   replica goes to the first waiter (in fair order) whose favourite it is
   (:meth:`PrefixAffinity.preference`), and only to another waiter when none wants it:
   saturation does not scatter heads, and no slot idles while anyone waits.

Compared with SGLang's approximate radix tree (`cache_aware`)
-------------------------------------------------------------
SGLang's router keeps, per router process, a radix tree of the request texts it sent to
each worker, routes to the worker with the longest match when the match rate is over a
threshold, and to the worker with the smallest tree otherwise.

Pros of rendezvous hashing here:
- No state at all: N gateways, a restarted gateway and a freshly scaled-out gateway all
  send a head to the same replica from the first request. N routers each learning
  their own tree scatter a head over up to N replicas, one per router.
- Adding or removing a replica remaps only the heads whose first choice it was (1/n of
  them); the others keep their warm caches. The ranking depends on urls, not list order.
- O(replicas) small hashes per request, no memory growth, no eviction thread.

Cons:
- Only the exact head counts: two system prompts that differ in their last sentence get
  unrelated keys, where the tree would credit the long common part. Conversations are
  placed by their system prompt, not by their own history.
- It does not learn: after a spill the tree remembers that the head now also lives on
  the second replica; the hash keeps preferring the first one, and no policy sees the
  replica's own evictions.
- It ignores sizes: a 4k-token head weighs as much as a 100-token one, and a handful of
  heads can land unevenly (32 heads on 4 replicas: about 8 each, give or take 2-3),
  where the tree sends new heads to the replica with the smallest tree.
- Loads are per gateway (our in-flight) plus a few-seconds-old scrape, so under overload
  two gateways may spill at slightly different moments, though to the same replicas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import blake2b

from gateway.routing.balancing.base import BalanceRequest, ReplicaView, eligible


@dataclass(frozen=True, slots=True)
class BoundedLoad:
    """When a favourite replica counts as overloaded.

    The rule: a favourite is passed over when its load exceeds the least loaded eligible
    replica's by more than `gap` requests and by more than `rel_threshold` times, where
    `gap = max(1, ceil(cap_share * max_in_flight))` (the replica's in-flight cap; 10 for an
    H100's 40, 1 for a 4-slot llama-server), or `abs_threshold` when it is set.

    Why the gap follows the cap: the pool never lets this gateway's in-flight count pass
    the cap, so a fixed gap at or above it (SGLang's 64, made for one router in front of
    large GPU batches) never triggers, and a hot head fills its favourite to the cap
    while the other replicas idle; under a burst one replica then runs a full batch and
    the rest a fraction of one. A quarter of the cap keeps a head at home while its
    replica's batch is still small (a step costs about the same at 1 or cap/4 running,
    and staying saves a prefill) and spreads a burst so that no replica holds more than
    the others by more than cap/4, as consistent hashing with bounded loads caps a
    server at c x the mean. `rel_threshold` keeps it from spilling between busy
    replicas over a small relative difference. Measure with `bench/batching.py`.
    """

    # a fixed gap in requests, whatever the cap (SGLang's router: 64); None: scaled
    abs_threshold: int | None = None
    rel_threshold: float = 1.5
    kv_threshold: float = 0.95
    cap_share: float = 0.25

    def gap(self, replica: ReplicaView) -> int:
        """How many requests `replica` may lead the least loaded one by, and stay chosen."""
        if self.abs_threshold is not None:
            return self.abs_threshold
        return max(1, math.ceil(self.cap_share * replica.max_in_flight))

    def overloaded(self, replica: ReplicaView, least_load: int, least_kv_usage: float) -> bool:
        """Whether to pass `replica` over, given the lowest load and KV usage among the
        eligible replicas."""
        lead = replica.load - least_load
        if lead > self.gap(replica) and replica.load > self.rel_threshold * least_load:
            return True
        return replica.kv_usage >= self.kv_threshold > least_kv_usage


class PrefixAffinity:
    def __init__(self, bounds: BoundedLoad | None = None) -> None:
        self._bounds = bounds or BoundedLoad()
        self._turn = 0

    @property
    def name(self) -> str:
        return "prefix_affinity"

    @property
    def bounds(self) -> BoundedLoad:
        return self._bounds

    def select(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> int | None:
        candidates = eligible(replicas)
        if not candidates:
            return None
        key = request.routing_key
        if key is None:
            return self._least_loaded(replicas, candidates)
        ranking = rendezvous_order(key, [replicas[i].url for i in candidates])
        least_load = min(replicas[i].load for i in candidates)
        least_kv_usage = min(replicas[i].kv_usage for i in candidates)
        for position in ranking:
            index = candidates[position]
            if not self._bounds.overloaded(replicas[index], least_load, least_kv_usage):
                return index
        return candidates[ranking[0]]

    def preference(self, replicas: Sequence[ReplicaView], request: BalanceRequest) -> list[int]:
        key = request.routing_key
        if key is None:
            return []
        return rendezvous_order(key, [replica.url for replica in replicas])

    def _least_loaded(self, replicas: Sequence[ReplicaView], candidates: list[int]) -> int:
        self._turn += 1
        offset = self._turn % len(candidates)
        rotated = candidates[offset:] + candidates[:offset]
        return min(rotated, key=lambda index: (replicas[index].load, replicas[index].kv_usage))


def rendezvous_order(key: int, urls: Sequence[str]) -> list[int]:
    """Positions in `urls`, best first, by highest random weight for `key`."""
    key_bytes = (key % 2**64).to_bytes(8, "big")
    scores = [blake2b(key_bytes + url.encode("utf-8"), digest_size=8).digest() for url in urls]
    return sorted(range(len(urls)), key=lambda position: scores[position], reverse=True)
