"""llama-server's `/metrics` and `/slots` pages read into a pool's load (the pages as a
real llama-server, llama-cpp-python 0.3.36's vendored llama.cpp, writes them), and the
cap a replica takes from its slot count, against a small server speaking those pages."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gateway.pools import ReplicaPool, parse_metrics
from gateway.pools.llamacpp_slots import parse_slots
from gateway.settings.server import ReplicaPoolSettings

METRICS_PAGE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 3000
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 9000
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.713
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 420
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 211
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 4207.57
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 5
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1.6
"""


def slot(index: int, busy: bool, tokens: int, n_ctx: int = 1000) -> dict[str, object]:
    entry: dict[str, object] = {
        "id": index,
        "n_ctx": n_ctx,
        "speculative": False,
        "is_processing": busy,
    }
    if tokens:
        entry.update(
            {
                "id_task": 100 + index,
                "n_prompt_tokens": tokens,
                "n_prompt_tokens_processed": tokens // 2,
                "n_prompt_tokens_cache": tokens // 2,
                "params": {"n_predict": 64},
                "next_token": [{"has_next_token": busy, "n_remain": 10, "n_decoded": 5}],
            }
        )
    return entry


# two busy slots holding 300 + 200 tokens, an idle one keeping a 900-token prefix, and a
# slot never used (no task fields at all)
SLOTS = [slot(0, True, 300), slot(1, True, 200), slot(2, False, 900), slot(3, False, 0)]


def test_metrics_give_running_deferred_and_the_prompt_cache_hit_rate() -> None:
    load = parse_metrics(METRICS_PAGE, "llamacpp")
    assert (load.running, load.queued) == (2, 5)
    # prompt_tokens_total excludes cached tokens: 9000 reused of 12000
    assert load.cache_hit_rate == 0.75
    # current servers do not say KV use on /metrics, nor how many slots they have
    assert (load.kv_usage, load.slots) == (0.0, None)


def test_older_servers_kv_usage_ratio_is_read_from_metrics() -> None:
    page = (
        METRICS_PAGE
        + "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.4\n"
    )
    assert parse_metrics(page, "llamacpp").kv_usage == 0.4


def test_a_server_that_reused_nothing_yet_has_no_hit_rate() -> None:
    assert parse_metrics("# nothing yet\n", "llamacpp").cache_hit_rate is None


def test_slots_give_the_slot_count_and_the_busy_slots_share_of_the_kv_cells() -> None:
    page = parse_slots(json.dumps(SLOTS).encode())
    assert (page.slots, page.busy) == (4, 2)
    # the idle slot's cached prefix is reusable, not load
    assert page.kv_usage == pytest.approx(500 / 4000)


@pytest.mark.parametrize("body", [b"<html>no</html>", b'{"error": "not found"}', b"[{}, 3]"])
def test_a_page_that_is_not_a_slots_list_is_an_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        parse_slots(body)


class LlamaPages(BaseHTTPRequestHandler):
    """/health, /metrics and /slots as llama-server serves them; /slots optional."""

    slots_enabled = True

    def do_GET(self) -> None:
        if self.path == "/health":
            self.answer(200, b'{"status":"ok"}', "application/json")
        elif self.path == "/metrics":
            self.answer(200, METRICS_PAGE.encode(), "text/plain; version=0.0.4")
        elif self.path == "/slots" and self.slots_enabled:
            self.answer(200, json.dumps(SLOTS).encode(), "application/json")
        else:
            self.answer(
                501,
                b'{"error":{"code":501,"message":"This server does not support slots endpoint."}}',
                "application/json",
            )

    def answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(slots_enabled: bool) -> Iterator[str]:
    handler = type("Pages", (LlamaPages,), {"slots_enabled": slots_enabled})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def llama_url() -> Iterator[str]:
    yield from serve(slots_enabled=True)


@pytest.fixture
def llama_url_without_slots() -> Iterator[str]:
    yield from serve(slots_enabled=False)


def scraped_pool(url: str, **settings: object) -> ReplicaPool:
    pool = ReplicaPool(
        "llama",
        ReplicaPoolSettings.model_validate(
            {"urls": [url], "metrics_style": "llamacpp", **settings}
        ),
    )

    async def check() -> None:
        await pool.check_now()
        await pool.stop()

    asyncio.run(check())
    return pool


def test_a_llamacpp_replica_is_capped_at_its_slot_count(llama_url: str) -> None:
    replica = scraped_pool(llama_url).replicas[0]
    assert replica.max_in_flight == 4
    load = replica.scraped
    assert (load.running, load.queued, load.slots) == (2, 5, 4)
    assert load.kv_usage == pytest.approx(500 / 4000)


def test_an_explicit_cap_is_kept_over_the_slot_count(llama_url: str) -> None:
    assert scraped_pool(llama_url, max_inflight_per_replica=9).replicas[0].max_in_flight == 9


def test_without_slots_the_metrics_still_count_and_the_cap_stays(
    llama_url_without_slots: str,
) -> None:
    replica = scraped_pool(llama_url_without_slots, gpu_class="a100").replicas[0]
    assert (replica.scraped.running, replica.scraped.queued) == (2, 5)
    assert replica.scraped.slots is None
    assert replica.max_in_flight == 20
