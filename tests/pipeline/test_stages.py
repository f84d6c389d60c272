"""The stages in their order, through `pipeline.run.serve`, on real in-memory stores and a
fake provider over real HTTP: each test names what one stage owes the others."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gateway.observability.logs import ACCESS_LOGGER
from gateway.pipeline.runtime import GatewayRuntime
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.pipeline.support import (
    KEY,
    RecordingClient,
    call,
    one_model_policy,
    running,
    settled,
    write_config,
)

HI = {"model": "m", "messages": [{"role": "user", "content": "hi there"}]}


@pytest.fixture(scope="module")
def fake() -> Any:
    with OpenAIFake() as server:
        yield server


def records(runtime: GatewayRuntime) -> list[Any]:
    ledger = runtime.stores.memory_ledger
    assert ledger is not None
    return list(ledger.records)


def test_an_unknown_key_is_refused_before_the_body_is_read(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            client = await call(rt, HI, key="gw-wrong")
            assert client.status == 401 and not client.body_read
            assert client.json()["error"]["code"] == "invalid_api_key"
            assert client.headers["x-request-id"]

    asyncio.run(scenario())


def test_a_bad_body_is_refused_before_planning(tmp_path: Path, fake: OpenAIFake) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            fake.requests.clear()
            client = await call(rt, b'{"model": "m", "messages": [')
            assert client.status == 400
            assert client.json()["error"]["code"] == "invalid_json"
            assert "x-gateway-route" not in client.headers and fake.requests == []

    asyncio.run(scenario())


def test_a_refused_admission_never_reaches_the_upstream(tmp_path: Path, fake: OpenAIFake) -> None:
    policy = one_model_policy(limits={"requests_per_minute": 1})

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            fake.requests.clear()
            assert (await call(rt, HI)).status == 200
            refused = await call(rt, HI)
            assert refused.status == 429 and refused.headers["retry-after"]
            assert len(fake.requests) == 1
            await settled(rt)
            assert [r.status for r in records(rt)] == [200]

    asyncio.run(scenario())


def test_the_answer_is_priced_once_and_the_ledger_agrees_with_the_header(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            client = await call(rt, HI)
            usage = client.json()["usage"]
            expected = Decimal(usage["prompt_tokens"] + 2 * usage["completion_tokens"]) / 10**6
            assert Decimal(client.headers["x-gateway-cost-usd"]) == expected
            await settled(rt)
            (record,) = records(rt)
            assert (
                Decimal(record.cost_usd) == expected
                and record.request_id == client.headers["x-request-id"]
            )

    asyncio.run(scenario())


def test_requests_that_share_a_client_request_id_are_each_billed(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    """The client's `x-request-id` is echoed and recorded, but a client may send the same
    one (a tracing id) with many requests: the ledger keeps each by an id of ours."""

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            headers = {"x-request-id": "trace-session-7"}
            answers = [await call(rt, HI, headers=headers) for _ in range(3)]
            assert all(a.headers["x-request-id"] == "trace-session-7" for a in answers)
            await settled(rt)
            kept = records(rt)
            assert len(kept) == 3
            assert {r.request_id for r in kept} == {"trace-session-7"}
            assert len({r.record_id for r in kept}) == 3
            total = sum(Decimal(a.headers["x-gateway-cost-usd"]) for a in answers)
            assert sum(Decimal(r.cost_usd) for r in kept) == total

    asyncio.run(scenario())


def test_requests_that_share_a_client_request_id_do_not_share_a_concurrency_slot(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    """Limits know a request by an id of ours too: a client's repeated `x-request-id` is
    not one request holding one slot."""
    policy = one_model_policy(limits={"max_concurrent": 1})
    headers = {"x-request-id": "trace-session-8"}

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            fake.enqueue(Reply(delay=0.3))
            first = asyncio.ensure_future(call(rt, HI, headers=headers))
            await asyncio.sleep(0.1)
            during = await call(rt, HI, headers=headers)
            assert during.status == 429  # the first one holds the only slot
            assert (await first).status == 200

    asyncio.run(scenario())


def test_requests_that_share_a_client_request_id_each_settle_their_budget_reservation(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    """Each request's worst case (8,192 output tokens at $2/M: ~$0.0164) is reserved and
    then replaced by its real cost. A settlement skipped as "already done" for a repeated
    `x-request-id` would leave the reservation charged, and the third request would find
    the $0.03 budget spent."""
    policy = one_model_policy(budgets=[{"usd": "0.03"}])
    headers = {"x-request-id": "trace-session-9"}

    async def scenario() -> list[int]:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            statuses = []
            for _ in range(4):
                statuses.append((await call(rt, HI, headers=headers)).status)
                await settled(rt)
            return statuses

    assert asyncio.run(scenario()) == [200] * 4


def test_a_lease_is_held_for_the_whole_stream_and_freed_with_its_settlement(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    policy = one_model_policy(limits={"max_concurrent": 1})

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            fake.enqueue(Reply(words=["a"] * 20, chunk_delay=0.02))
            stream = asyncio.ensure_future(call(rt, {**HI, "stream": True}))
            await asyncio.sleep(0.15)
            during = await call(rt, HI)
            assert during.status == 429  # the stream still holds the only slot
            assert (await stream).status == 200
            await settled(rt)
            assert (await call(rt, HI)).status == 200

    asyncio.run(scenario())


def test_a_client_that_leaves_mid_stream_is_billed_for_what_was_generated(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            fake.enqueue(Reply(words=["w"] * 50, chunk_delay=0.01))
            body = json.dumps({**HI, "stream": True}).encode()
            client = RecordingClient(body, leave_after_frames=5)
            await call(rt, body, client=client)
            await settled(rt)
            (record,) = records(rt)
            assert record.status == 499
            assert record.estimated and record.output_tokens >= 4
            assert Decimal(record.cost_usd) > 0

    asyncio.run(scenario())


class LedgerWatchingClient(RecordingClient):
    """A client that notes which records the ledger held when the answer's last bytes
    reached it."""

    def __init__(self, body: bytes, runtime: GatewayRuntime) -> None:
        super().__init__(body)
        self._runtime = runtime
        self.recorded_at_end: list[str] = []

    async def send(self, body: bytes, more: bool) -> None:
        if not more:
            self.recorded_at_end = [r.record_id for r in records(self._runtime)]
        await super().send(body, more)


@pytest.mark.parametrize("stream", [False, True])
def test_a_complete_answer_is_in_the_ledger_before_its_last_bytes_go_out(
    tmp_path: Path, fake: OpenAIFake, stream: bool
) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            body = json.dumps({**HI, "stream": stream}).encode()
            client = LedgerWatchingClient(body, rt)
            await call(rt, body, client=client)
            assert client.status == 200 and client.ended
            (record,) = records(rt)  # recorded once, not again by settle
            assert client.recorded_at_end == [record.record_id]
            assert record.status == 200 and record.latency_ms > 0

    asyncio.run(scenario())


@pytest.mark.parametrize("stream", [False, True])
def test_a_cached_answer_is_in_the_ledger_before_its_last_bytes_go_out(
    tmp_path: Path, fake: OpenAIFake, stream: bool
) -> None:
    policy = one_model_policy()
    policy["routes"] = {"cached": {"models": ["m"], "cache": {"ttl_seconds": 600}}}

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            body = json.dumps({**HI, "model": "cached", "stream": stream}).encode()
            await call(rt, body)  # a miss: stored
            hit = LedgerWatchingClient(body, rt)
            await call(rt, body, client=hit)
            assert hit.status == 200 and hit.headers["x-gateway-cache"] == "hit"
            miss_record, hit_record = records(rt)
            assert hit_record.cache == "hit"
            assert hit.recorded_at_end == [miss_record.record_id, hit_record.record_id]

    asyncio.run(scenario())


def test_a_stream_an_upstream_cuts_short_ends_with_an_error_event_then_done(
    tmp_path: Path, fake: OpenAIFake
) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            fake.enqueue(Reply(words=["a", "b", "c"], fail_after_chunks=2))
            client = await call(rt, {**HI, "stream": True})
            assert client.status == 200 and client.ended
            events = [e for e in client.body.decode().split("\n\n") if e]
            assert events[-1] == "data: [DONE]"
            assert json.loads(events[-2].removeprefix("data: "))["error"]["message"]

    asyncio.run(scenario())


def test_completions_go_through_the_same_stages(tmp_path: Path, fake: OpenAIFake) -> None:
    policy = one_model_policy(limits={"requests_per_minute": 1})

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            first = await call(rt, {"model": "m", "prompt": "hi"}, path="/v1/completions")
            assert first.status == 200 and first.json()["object"] == "text_completion"
            assert first.headers["x-gateway-cost-usd"]
            second = await call(rt, HI)  # the same key's bucket, whatever the API
            assert second.status == 429
            await settled(rt)
            assert len(records(rt)) == 1

    asyncio.run(scenario())


def test_the_key_is_read_where_the_codec_says(tmp_path: Path, fake: OpenAIFake) -> None:
    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            malformed = await call(rt, HI, key=None, headers={"authorization": "Basic abc"})
            assert malformed.status == 401
            assert "Malformed" in malformed.json()["error"]["message"]
            assert (
                await call(rt, HI, key=None, headers={"authorization": f"bearer {KEY}"})
            ).status == 200

    asyncio.run(scenario())


def _access_lines(written: str) -> list[dict[str, Any]]:
    """The access-log lines the runtime's log pipeline wrote (JSON, one a line)."""
    lines = [json.loads(line) for line in written.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == ACCESS_LOGGER]


def test_retries_on_a_models_only_deployment_are_not_a_fallback(
    tmp_path: Path, fake: OpenAIFake, capsys: pytest.CaptureFixture[str]
) -> None:
    unavailable = Reply(status=503, body={"error": {"message": "overloaded", "type": "server"}})

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, one_model_policy())) as rt:
            fake.requests.clear()
            fake.enqueue(unavailable, unavailable, unavailable)
            client = await call(rt, HI)
            assert client.status == 502 and len(fake.requests) == 3
            await settled(rt)

    asyncio.run(scenario())
    (entry,) = _access_lines(capsys.readouterr().err)
    # three attempts on the one deployment: retried, with no other model to fall back to
    assert entry["retries"] == 2 and entry["status"] == 502
    assert entry.get("fallback", False) is False and "fallback_from" not in entry


def test_a_second_model_after_the_first_failed_is_a_fallback(
    tmp_path: Path, fake: OpenAIFake, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = one_model_policy()
    policy["models"]["backup"] = {
        "deployments": [{"provider": "fake", "upstream_model": "up2"}],
        "prices": {"input": 1.0, "output": 2.0},
    }
    policy["routes"] = {"pair": {"strategy": "ordered", "models": ["m", "backup"]}}
    unavailable = Reply(status=503, body={"error": {"message": "overloaded", "type": "server"}})

    async def scenario() -> None:
        async with running(write_config(tmp_path, fake.base_url, policy)) as rt:
            fake.requests.clear()
            fake.enqueue(unavailable, unavailable, unavailable)
            client = await call(rt, {**HI, "model": "pair"})
            assert client.status == 200
            await settled(rt)

    asyncio.run(scenario())
    (entry,) = _access_lines(capsys.readouterr().err)
    assert entry["fallback"] is True and entry["fallback_from"] == "m:503"
