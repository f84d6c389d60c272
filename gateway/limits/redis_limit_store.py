"""The Redis limit store: every check and take is a Lua script (`lua/*.lua`) run with
EVALSHA on Redis server time, so any number of gateway replicas share one limit.

On a single Redis a request's admission is one script call, and the admissions of one
scope (the same keys) made in the same event-loop turn share it: the script takes them
in order, each as if alone, reading and writing each key once for all of them; so do
the settlements queued together. On Redis Cluster it is one call per hash tag (tenant,
then deployment; see :mod:`gateway.limits.redis_keys`), and a later refusal rolls the
earlier calls back.

Every call has a deadline (`timeout_seconds`) and the client never retries on its own;
a Redis that is down, slow or refusing surfaces as
:class:`gateway.errors.StoreUnavailable` at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Awaitable, Sequence
from importlib.resources import files
from typing import Any, cast

import msgspec
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from gateway.errors import StoreUnavailable
from gateway.limits.outcome import Outcome, admission_from, outcome_from_script
from gateway.limits.redis_keys import hash_tag, settled_marker_key
from gateway.limits.script_batch import ScriptBatcher
from gateway.limits.spec import (
    Admission,
    AdmissionRequest,
    BudgetActual,
    Lease,
    Settlement,
    TokenAdjustment,
)
from gateway.redis_resp import pack_args, pack_header

log = logging.getLogger("gateway.limits")

RedisClient = Redis | RedisCluster
# a settled request's marker outlives any retry of its settlement: the only one is the
# same call's (a cluster client's one immediate retry), within the call's deadline; a
# batch that timed out is failed, never sent again, and a failed settlement is not
# retried (the guard keeps the reservation, the safe side). Ten minutes, not a day: a
# marker per request is rate x TTL keys (3,000 a second for a day was ~260 million)
SETTLED_MARKER_TTL_SECONDS = 600
# script calls one store runs at once (redis-py's cluster pools allow 100 per node)
MAX_IN_FLIGHT = 64
# admission shapes (scope x calendar period) kept packed; past this many, start afresh
MAX_ADMIT_SHAPES = 4096
# calendar budgets stay readable this long after their period ends (admit.lua's EXPIREAT)
PERIOD_GRACE = 3600


class _AdmitShape:
    """What every admit.lua call of one shape (the same keys, capacities, leases and
    budget limits; only the request ids and amounts differ) sends: its keys and constant
    spec (admit.lua's leading arguments), and the EVALSHA packed up to the requests' own
    arguments. `command` packs the run of a batch of requests, each given as its packed
    arguments."""

    __slots__ = ("arguments", "body", "keys", "per_request", "spec")

    def __init__(self, keys: list[str], spec: list[str], sha: str, per_request: int) -> None:
        self.keys = keys
        self.spec = spec
        # EVALSHA, sha, key count, keys, spec (admit.lua counts the requests)
        self.arguments = 3 + len(keys) + len(spec)
        self.body = pack_args(["EVALSHA", sha, len(keys), *keys, *spec])
        self.per_request = per_request

    def command(self, requests: list[bytes]) -> bytes:
        count = len(requests)
        return b"".join(
            [
                pack_header(self.arguments + count * self.per_request),
                self.body,
                *requests,
            ]
        )


class _SettleShape:
    """The adjust.lua run of a batch of settlements over the same keys and buckets: each
    brings its marker key and its packed arguments (`per_settlement` of them)."""

    __slots__ = ("body", "head", "keys", "keys_and_head", "per_settlement")

    def __init__(self, keys: tuple[str, ...], head: list[str], sha: str, per: int) -> None:
        self.keys = keys
        self.body = pack_args(["EVALSHA", sha])
        self.head = pack_args(head)
        # EVALSHA, sha, key count, keys, head; then each settlement's marker and arguments
        self.per_settlement = 1 + per
        self.keys_and_head = 3 + len(keys) + len(head)

    def command(self, settlements: list[tuple[str, bytes]]) -> bytes:
        count = len(settlements)
        return b"".join(
            [
                pack_header(self.keys_and_head + self.per_settlement * count),
                self.body,
                pack_args((len(self.keys) + count, *self.keys)),
                pack_args([marker for marker, _ in settlements]),
                self.head,
                *[arguments for _, arguments in settlements],
            ]
        )


class _Script:
    """A Lua script run by its SHA; loaded again when Redis forgot it (restart, flush)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = files("gateway.limits").joinpath(f"lua/{name}.lua").read_text()
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        # bumped on each load, so tasks that all saw NOSCRIPT load the script once
        self.loads = 0

    async def load(self, client: RedisClient) -> None:
        loaded = await _awaited(client.script_load(self.source))
        if loaded != self.sha:
            raise RuntimeError(f"Redis hashed {self.name}.lua differently")
        self.loads += 1

    async def run(
        self,
        client: RedisClient,
        keys: Sequence[str],
        args: Sequence[str | bytes | int],
        loading: asyncio.Lock,
    ) -> Any:
        loads_seen = self.loads
        try:
            return await _awaited(client.evalsha(self.sha, len(keys), *keys, *args))
        except NoScriptError:
            # one load at a time: redis-py's cluster client drops connections when a
            # burst of SCRIPT LOADs runs at once
            async with loading:
                if self.loads == loads_seen:
                    await self.load(client)
            return await _awaited(client.evalsha(self.sha, len(keys), *keys, *args))


async def _awaited(result: Any) -> Any:
    # redis-py types its commands as `Awaitable[T] | T` to share them with the sync client
    return await cast(Awaitable[Any], result)


def redis_client(
    url: str, *, timeout_seconds: float, cluster: bool = False, max_connections: int = 128
) -> RedisClient:
    """A client that gives up after `timeout_seconds` and leaves retrying to the caller.

    Past `max_connections` in use, a call waits for a free connection (within its
    deadline) instead of failing: a burst queues briefly rather than failing open. (The
    cluster client has no waiting pool; :class:`RedisLimitStore` caps calls in flight.)
    """
    options: dict[str, Any] = {
        "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds,
        "retry": Retry(NoBackoff(), 0),
    }
    if cluster:
        # the cluster client's fresh connections can drop the first command of a burst;
        # one immediate retry (inside the caller's deadline) absorbs that
        options["retry"] = Retry(NoBackoff(), 1)
        return RedisCluster.from_url(url, **options)
    pool = BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=timeout_seconds, **options
    )
    return Redis.from_pool(pool)


async def detect_cluster(url: str, *, timeout_seconds: float) -> bool:
    """Whether the server at `url` runs in cluster mode; False when it cannot be asked."""
    probe = Redis.from_url(url, socket_timeout=timeout_seconds, retry=Retry(NoBackoff(), 0))
    try:
        async with asyncio.timeout(timeout_seconds * 4):
            info = await probe.info("cluster")
        return bool(info.get("cluster_enabled"))
    except (RedisError, OSError, TimeoutError):
        log.warning("could not ask Redis whether it is a cluster; assuming it is not")
        return False
    finally:
        await probe.aclose()


class RedisLimitStore:
    def __init__(
        self,
        client: RedisClient,
        *,
        timeout_seconds: float,
        cluster: bool | None = None,
        settled_marker_ttl_seconds: int = SETTLED_MARKER_TTL_SECONDS,
        max_in_flight: int = MAX_IN_FLIGHT,
        company_wait_seconds: float | None = None,
    ) -> None:
        """`company_wait_seconds`: how long a call that can wait waits for others to
        share its write (None: the batcher's WAIT_FOR_COMPANY_SECONDS)."""
        self._client = client
        # below the client's connection limit, so a burst waits its turn instead of failing
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._loading = asyncio.Lock()
        self._timeout = timeout_seconds
        self._cluster = isinstance(client, RedisCluster) if cluster is None else cluster
        # each call gives up after this long, so the guard needs no timer of its own; on a
        # cluster one call may be several in a row, so it keeps its own
        self.call_deadline_seconds: float | None = None if self._cluster else timeout_seconds
        # and always well past the call's own deadline, however long it is configured
        self._marker_ttl = max(settled_marker_ttl_seconds, math.ceil(timeout_seconds * 10))
        self._admit = _Script("admit")
        self._adjust = _Script("adjust")
        self._renew = _Script("renew")
        self._admit_shapes: dict[object, _AdmitShape] = {}
        self._settle_shapes: dict[object, _SettleShape] = {}
        # a single Redis takes pipelines of script calls; a cluster's calls go one by one
        self._batcher = (
            ScriptBatcher(
                client,
                timeout_seconds=timeout_seconds,
                company_wait_seconds=company_wait_seconds,
            )
            if isinstance(client, Redis) and not self._cluster
            else None
        )

    @classmethod
    async def open(
        cls, url: str, *, timeout_seconds: float, cluster: bool | None = None
    ) -> RedisLimitStore:
        """Connect to `url`, asking the server whether it is a cluster unless told."""
        if cluster is None:
            cluster = await detect_cluster(url, timeout_seconds=timeout_seconds)
        client = redis_client(url, timeout_seconds=timeout_seconds, cluster=cluster)
        store = cls(client, timeout_seconds=timeout_seconds, cluster=cluster)
        await store.load_scripts()
        return store

    async def load_scripts(self) -> bool:
        """SCRIPT LOAD every script now, so the first burst does not all see NOSCRIPT.
        False when Redis cannot be reached; the scripts then load on first use."""
        try:
            async with asyncio.timeout(self._timeout), self._loading:
                for script in (self._admit, self._adjust, self._renew):
                    await script.load(self._client)
        except (RedisError, OSError, TimeoutError):
            log.warning("could not load the limits scripts into Redis yet")
            return False
        return True

    async def admit(self, request: AdmissionRequest) -> Admission:
        if not (request.buckets or request.leases or request.budgets):
            return Admission(allowed=True)
        checked: list[tuple[AdmissionRequest, Outcome]] = []
        for part in self._parts(request):
            outcome = await self._admit_part(part)
            checked.append((part, outcome))
            if not outcome.ok:
                await self._roll_back(checked[:-1])
                break
        return admission_from(checked)

    async def settle(self, settlement: Settlement) -> bool:
        applied = True
        for keys, arguments in self._settle_calls(settlement):
            done = bool((await self._call(self._adjust, keys, arguments))[0])
            applied = applied and done
        return applied

    async def settle_many(
        self, settlements: Sequence[Settlement], *, can_wait: bool = True
    ) -> list[bool]:
        """Many requests' settlements at once: on a single Redis they all go out in the
        same pipeline, with no task per request; with `can_wait`, in the write of the next
        calls made (or after the batcher's `company_wait_seconds`), else at once."""
        if self._batcher is None:
            return [await self.settle(settlement) for settlement in settlements]
        # a single Redis: the settlements of the same keys share one adjust run (an empty
        # settlement needs none)
        batcher = self._batcher
        answers = [self._settle_merged(batcher, s, can_wait) if s else None for s in settlements]
        pending = [answer for answer in answers if answer is not None]
        results: list[Any]
        if len(pending) == 1:  # one request at a time: no gathering future
            try:
                results = [await pending[0]]
            except Exception as error:
                results = [error]
        else:
            results = await asyncio.gather(*pending, return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise _unavailable(failure, self._timeout)
        done = iter(results)
        return [True if answer is None else bool(next(done)) for answer in answers]

    def _settle_merged(self, batcher: ScriptBatcher, settlement: Settlement, can_wait: bool) -> Any:
        """The settlement's part of its keys' adjust run."""
        keys, buckets, marker, arguments = self._settlement_parts(settlement)
        signature = (keys, buckets)
        shape = self._settle_shapes.get(signature)
        if shape is None:
            if len(self._settle_shapes) >= MAX_ADMIT_SHAPES:
                self._settle_shapes.clear()
            head = _adjust_head(
                buckets, len(settlement.budgets), len(settlement.leases), self._marker_ttl
            )
            shape = self._settle_shapes[signature] = _SettleShape(
                keys, head, self._adjust.sha, len(arguments)
            )
        # the request has been answered: its settlement may ride with the next admissions
        return batcher.run_merged(
            self._adjust, shape, shape.command, (marker, pack_args(arguments)), can_wait=can_wait
        )

    def _settle_calls(self, settlement: Settlement) -> list[tuple[list[str], list[str | int]]]:
        """The adjust script calls of one settlement: one per cluster slot it touches."""
        if not self._cluster:
            if not settlement:
                return []
            keys, buckets, marker, arguments = self._settlement_parts(settlement)
            head = _adjust_head(
                buckets, len(settlement.budgets), len(settlement.leases), self._marker_ttl
            )
            return [([*keys, marker], [*head, *arguments])]
        groups: dict[str, tuple[list[TokenAdjustment], list[BudgetActual], list[Lease]]] = {}
        for adjustment in settlement.tokens:
            tag = self._tag(adjustment.bucket.key)
            groups.setdefault(tag, ([], [], []))[0].append(adjustment)
        for actual in settlement.budgets:
            groups.setdefault(self._tag(actual.key), ([], [], []))[1].append(actual)
        for lease in settlement.leases:
            groups.setdefault(self._tag(lease.key), ([], [], []))[2].append(lease)
        calls = []
        for tokens, budgets, leases in groups.values():
            first_key = (
                tokens[0].bucket.key if tokens else budgets[0].key if budgets else leases[0].key
            )
            calls.append(
                self._adjust_call(
                    bucket_deltas=[
                        (a.bucket.key, a.bucket.capacity, a.bucket.refill_per_second, a.delta)
                        for a in tokens
                    ],
                    budget_deltas=[(b.key, b.field, b.delta_micros) for b in budgets],
                    leases=leases,
                    marker=settled_marker_key(first_key, settlement.request_id),
                )
            )
        return calls

    def _settlement_parts(
        self, settlement: Settlement
    ) -> tuple[tuple[str, ...], tuple[tuple[int, float], ...], str, list[str | int]]:
        """One Redis's single adjust call of a settlement: its keys but the marker, its
        buckets' capacities and rates (adjust.lua's head), the marker key, and its own
        arguments."""
        tokens, budgets, leases = settlement.tokens, settlement.budgets, settlement.leases
        first_key = tokens[0].bucket.key if tokens else budgets[0].key if budgets else leases[0].key
        keys: list[str] = []
        buckets: list[tuple[int, float]] = []
        arguments: list[str | int] = []
        # loops, not generators: a generator's frame resumed per item costs more
        for adjustment in tokens:
            bucket = adjustment.bucket
            keys.append(bucket.key)
            buckets.append((bucket.capacity, bucket.refill_per_second))
            arguments.append(adjustment.delta)
        for actual in budgets:
            keys.append(actual.key)
            arguments.append(actual.field)
            arguments.append(actual.actual_micros - actual.reserved_micros)
        for lease in leases:
            keys.append(lease.key)
            arguments.append(lease.member)
        marker = settled_marker_key(first_key, settlement.request_id)
        return tuple(keys), tuple(buckets), marker, arguments

    async def release(self, leases: Sequence[Lease]) -> None:
        for group in self._group(leases).values():
            await self._run_adjust(bucket_deltas=[], budget_deltas=[], leases=group, marker=None)

    async def renew(self, leases: Sequence[Lease]) -> int:
        held = 0
        for group in self._group(leases).values():
            payload = msgspec.json.encode(
                {
                    "m": [lease.member for lease in group],
                    "t": [_ms(lease.ttl_seconds) for lease in group],
                }
            )
            keys = [lease.key for lease in group]
            held += int(await self._call(self._renew, keys, [payload]))
        return held

    async def ping(self) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                return bool(await _awaited(self._client.ping()))
        except (RedisError, OSError, TimeoutError):
            return False

    async def close(self) -> None:
        if self._batcher is not None:
            await self._batcher.close()
        await self._client.aclose()

    async def _admit_part(self, part: AdmissionRequest) -> Outcome:
        buckets, budgets = part.buckets, part.budgets
        signature = (
            tuple([(b.key, b.capacity, b.refill_per_second) for b in buckets]),
            part.leases,
            tuple([(g.key, g.limit_micros, g.period_end, g.window_seconds) for g in budgets]),
        )
        shape = self._admit_shapes.get(signature)
        if shape is None:
            shape = self._admit_shape(part, signature)
        args: list[str | int] = [part.request_id]
        args.extend([b.amount for b in buckets])
        args.extend([g.amount_micros for g in budgets])
        if self._batcher is not None:
            raw = await self._admit_merged(self._batcher, shape, pack_args(args))
        else:
            raw = (await self._call(self._admit, shape.keys, [*shape.spec, *args]))[0]
        return outcome_from_script(raw)

    def _admit_shape(self, part: AdmissionRequest, signature: object) -> _AdmitShape:
        keys = [
            *(b.key for b in part.buckets),
            *(lease.key for lease in part.leases),
            *(g.key for g in part.budgets),
        ]
        # admit.lua's head: the counts, then each bucket's, lease's and budget's constants
        spec = [str(len(part.buckets)), str(len(part.leases)), str(len(part.budgets))]
        for b in part.buckets:
            spec += [str(b.capacity), str(b.refill_per_second)]
        for lease in part.leases:
            spec += [str(lease.limit), str(_ms(lease.ttl_seconds))]
        for g in part.budgets:
            period_end, window = g.period_end or 0, g.window_seconds or 0
            # the key's expiry: EXPIRE seconds for a rolling window (it and one slot),
            # EXPIREAT for a calendar period (its end and the grace)
            expiry = window + max(1, -(-window // 60)) if window > 0 else period_end + PERIOD_GRACE
            spec += [str(g.limit_micros), str(period_end), str(window), str(expiry)]
        # each request: its id and amounts
        per_request = 1 + len(part.buckets) + len(part.budgets)
        if len(self._admit_shapes) >= MAX_ADMIT_SHAPES:
            self._admit_shapes.clear()
        shape = self._admit_shapes[signature] = _AdmitShape(
            keys, spec, self._admit.sha, per_request
        )
        return shape

    async def _roll_back(self, taken: Sequence[tuple[AdmissionRequest, Outcome]]) -> None:
        """Undo parts admitted before another part refused (Redis Cluster only)."""
        for part, outcome in taken:
            await self._run_adjust(
                bucket_deltas=[
                    (b.key, b.capacity, b.refill_per_second, -b.amount) for b in part.buckets
                ],
                budget_deltas=[
                    (g.key, field, -g.amount_micros)
                    for g, (_, field) in zip(part.budgets, outcome.budgets_used, strict=True)
                ],
                leases=[Lease(spec.key, part.request_id, spec.ttl_seconds) for spec in part.leases],
                marker=None,
            )

    async def _run_adjust(
        self,
        *,
        bucket_deltas: Sequence[tuple[str, int, float, int]],
        budget_deltas: Sequence[tuple[str, str, int]],
        leases: Sequence[Lease],
        marker: str | None,
    ) -> bool:
        if not (bucket_deltas or budget_deltas or leases):
            return True
        keys, arguments = self._adjust_call(
            bucket_deltas=bucket_deltas, budget_deltas=budget_deltas, leases=leases, marker=marker
        )
        return bool((await self._call(self._adjust, keys, arguments))[0])

    def _adjust_call(
        self,
        *,
        bucket_deltas: Sequence[tuple[str, int, float, int]],
        budget_deltas: Sequence[tuple[str, str, int]],
        leases: Sequence[Lease],
        marker: str | None,
    ) -> tuple[list[str], list[str | int]]:
        head = _adjust_head(
            [(capacity, rate) for _, capacity, rate, _ in bucket_deltas],
            len(budget_deltas),
            len(leases),
            self._marker_ttl if marker else 0,
        )
        arguments: list[str | int] = [*head, *(delta for *_, delta in bucket_deltas)]
        for _, field, delta in budget_deltas:
            arguments += [field, delta]
        arguments += [lease.member for lease in leases]
        keys = [
            *(key for key, *_ in bucket_deltas),
            *(key for key, *_ in budget_deltas),
            *(lease.key for lease in leases),
            *([marker] if marker else []),
        ]
        return keys, arguments

    async def _call(
        self, script: _Script, keys: Sequence[str], args: Sequence[str | bytes | int]
    ) -> Any:
        try:
            if self._batcher is not None:
                # the batch carries the deadline
                return await self._batcher.run(script, keys, args)
            async with asyncio.timeout(self._timeout), self._in_flight:
                return await script.run(self._client, keys, args, self._loading)
        except (TimeoutError, RedisError, OSError) as error:
            raise _unavailable(error, self._timeout) from error

    async def _admit_merged(self, batcher: ScriptBatcher, shape: _AdmitShape, item: bytes) -> Any:
        """The request's part of its shape's admit run (the other admissions of its scope
        made in the same turn)."""
        try:
            return await batcher.run_merged(self._admit, shape, shape.command, item)
        except (TimeoutError, RedisError, OSError) as error:
            raise _unavailable(error, self._timeout) from error

    def _tag(self, key: str) -> str:
        # a single Redis takes every key in one call; a cluster needs one call per slot
        return hash_tag(key) if self._cluster else ""

    def _parts(self, request: AdmissionRequest) -> list[AdmissionRequest]:
        if not self._cluster:
            return [request]
        tags: dict[str, None] = {}
        for key in (
            *(b.key for b in request.buckets),
            *(lease.key for lease in request.leases),
            *(g.key for g in request.budgets),
        ):
            tags.setdefault(hash_tag(key))
        return [
            AdmissionRequest(
                request_id=request.request_id,
                buckets=tuple(b for b in request.buckets if hash_tag(b.key) == tag),
                leases=tuple(lease for lease in request.leases if hash_tag(lease.key) == tag),
                budgets=tuple(g for g in request.budgets if hash_tag(g.key) == tag),
            )
            for tag in tags
        ] or [request]

    def _group(self, leases: Sequence[Lease]) -> dict[str, list[Lease]]:
        groups: dict[str, list[Lease]] = {}
        for lease in leases:
            groups.setdefault(self._tag(lease.key), []).append(lease)
        return groups


def _unavailable(error: BaseException, timeout_seconds: float) -> StoreUnavailable:
    if isinstance(error, StoreUnavailable):
        return error
    if isinstance(error, TimeoutError):
        return StoreUnavailable(
            f"the limits store (Redis) did not answer within {timeout_seconds * 1000:.0f} ms"
        )
    return StoreUnavailable(f"the limits store (Redis) failed: {type(error).__name__}")


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _adjust_head(
    buckets: Sequence[tuple[int, float]], budgets: int, leases: int, marker_ttl: int
) -> list[str]:
    """adjust.lua's leading arguments: the counts, the markers' TTL (0: none), then each
    bucket's capacity and refill per second (`str` of a float round-trips: Lua reads the
    same double)."""
    head = [str(len(buckets)), str(budgets), str(leases), str(marker_ttl)]
    for capacity, rate in buckets:
        head += [str(capacity), str(rate)]
    return head
