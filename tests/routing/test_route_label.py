"""`gateway route label`: a tenant's requests in, answered by a strong and a weak model
through a real gateway process, judged in both answer orders, and written as labelled
prompts that `gateway route train` fits a scorer on; a judge that favours a position, a
failing model, a wrong key and a run that stops half-way are each handled and said."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.cli import route_label
from gateway.cli.main import main
from gateway.routing.learned.judging import combine, judge_messages, read_verdict
from gateway.routing.learned.weights import load_scorer
from gateway.training.labelled import parse_line
from tests.e2e.support import wait_for
from tests.fakes.openai_server import OpenAIFake, Reply
from tests.support.gateway_process import GatewayProcess, key_hash, openai_provider
from tests.support.redis_server import free_port

KEY = "gw-test-label-key"
KEY_ENV = "GW_TEST_LABEL_KEY"
MODELS = ("--strong", "big", "--weak", "small", "--judge", "judge")
STRONG_WORDS = ["a", "careful", "complete", "answer"]
WEAK_WORDS = ["a", "quick", "answer"]
FILLER = ["please", "today", "quickly", "my", "team", "our", "project", "the", "client", "a"]


# --- the judge's prompt and verdicts -------------------------------------------------


def test_the_last_verdict_counts_and_a_missing_one_is_none() -> None:
    assert read_verdict("A is fine [[B]] but on reflection [[A]]") == "A"
    assert read_verdict("tie: [[ C ]]") == "C"
    assert read_verdict("I prefer A.") is None
    assert read_verdict("[[D]]") is None


def test_both_orders_make_one_label_and_a_positional_judge_is_a_tie() -> None:
    strong_wins = combine("A", "B")  # strong shown first, then second: it won both
    assert strong_wins is not None
    assert (strong_wins.strong_quality, strong_wins.weak_quality) == (1.0, 0.0)
    assert strong_wins.consistent
    weak_wins = combine("B", "A")
    assert weak_wins is not None and weak_wins.strong_quality == 0.0 and weak_wins.consistent
    first_always = combine("A", "A")  # whichever came first won
    assert first_always is not None
    assert first_always.strong_quality == 0.5 and not first_always.consistent
    tie = combine("C", "C")
    assert tie is not None and tie.strong_quality == 0.5 and tie.consistent
    one_order = combine(None, "B")
    assert one_order is not None and one_order.strong_quality == 1.0 and not one_order.consistent
    assert combine(None, None) is None


def test_the_judge_sees_the_whole_conversation_and_both_answers_in_order() -> None:
    messages = judge_messages(
        [("system", "be terse"), ("user", "hi"), ("assistant", "hello"), ("user", "why?")],
        "ANSWER-ONE",
        "ANSWER-TWO",
    )
    assert messages[0]["role"] == "system" and "[[A]]" in messages[0]["content"]
    body = messages[1]["content"]
    for text in ("be terse", "hi", "hello", "why?"):
        assert text in body
    assert body.index("ANSWER-ONE") < body.index("ANSWER-TWO")
    assert body.index("Assistant A") < body.index("ANSWER-ONE") < body.index("Assistant B")


# --- a fake provider whose judge has an opinion -----------------------------------


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def respond(request: dict[str, Any]) -> Reply | None:
    """big-up answers carefully, small-up quickly; judge-up prefers the careful answer on
    proofs, calls greetings a tie, always picks A on prompts that say "biased", gives no
    verdict on prompts that say "mute" and refuses the order with the careful answer first
    on prompts that say "judge-declines". small-up refuses prompts that say "refuse"."""
    model = request.get("model")
    messages = request.get("messages") or [{}]
    if model == "big-up":
        return Reply(words=STRONG_WORDS)
    if model == "small-up":
        if "refuse" in _text(messages[-1]):
            return Reply.error(400, "this prompt is too long for the model")
        return Reply(words=WEAK_WORDS)
    if model != "judge-up":
        return None
    body = _text(messages[-1])
    asked = body.split("[End of the conversation]")[0]
    answer_a = body.split("[Assistant A's answer]")[1]
    careful = "A" if "careful" in answer_a.split("[End of")[0] else "B"
    if "judge-declines" in asked and careful == "A":
        return Reply.error(400, "the judge will not read this")  # one order only
    if "mute" in asked:
        verdict = "no opinion"
    elif "biased" in asked:
        verdict = "[[A]]"
    elif "Prove" in asked:
        verdict = f"the careful one is right [[{careful}]]"
    else:
        verdict = "both fine [[C]]"
    return Reply(words=verdict.split())


def policy() -> dict[str, Any]:
    def model(upstream: str, price: float) -> dict[str, Any]:
        return {
            "deployments": [{"provider": "fake", "upstream_model": upstream}],
            "prices": {"input": price, "output": price},
        }

    return {
        "models": {
            # vision: a request with an image is served (and logged) too
            "big": {**model("big-up", 8), "capabilities": ["tools", "streaming", "vision"]},
            "small": model("small-up", 0.4),
            "judge": {**model("judge-up", 2), "aliases": ["referee"]},
        },
        "routes": {"chat": {"strategy": "cheapest", "models": ["small", "big"]}},
        "tenants": {"acme": {"keys": [{"id": "k", "hash": key_hash(KEY)}]}},
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(responder=respond) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def gateway(fake: OpenAIFake) -> Iterator[GatewayProcess]:
    config = {
        "providers": {"fake": openai_provider(fake.base_url)},
        "store": {"kind": "memory"},
        # the access log keeps each request's messages: `--from-access-log` reads them
        "server": {"log_content": True},
    }
    with GatewayProcess(config, policy()) as process:
        yield process


def requests_file(tmp_path: Path, prompts: list[str], name: str = "requests.jsonl") -> Path:
    path = tmp_path / name
    lines = [
        json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": p}]})
        for i, p in enumerate(prompts)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def label(
    gateway: GatewayProcess | None,
    data: Path,
    out: Path,
    *extra: str,
    base_url: str | None = None,
) -> int:
    if base_url is None:
        assert gateway is not None
        base_url = gateway.base_url
    return main(
        [
            "route",
            "label",
            "--data",
            str(data),
            "--out",
            str(out),
            "--base-url",
            base_url,
            "--api-key-env",
            KEY_ENV,
            *MODELS,
            *extra,
        ]
    )


def proofs_and_greetings(count: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        words = " ".join(rng.sample(FILLER, 4))
        if i % 2 == 0:
            prompts.append(f"Prove the theorem about the integral of {i} {words}")
        else:
            prompts.append(f"Say hello and list {i} greetings {words}")
    return prompts


# --- the loop, end to end -------------------------------------------------------------


def test_labels_from_the_gateway_train_a_scorer_that_ranks_new_prompts(
    gateway: GatewayProcess,
    fake: OpenAIFake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    data = requests_file(tmp_path, proofs_and_greetings(80))
    out = tmp_path / "labelled.jsonl"
    before = len(fake.requests)

    assert label(gateway, data, out, "--concurrency", "6") == 0
    printed = capsys.readouterr().out
    assert "labelled 80 requests this run; 80 of 80" in printed
    assert "strong better on 40, weak better on 0, tie on 40" in printed
    assert KEY not in printed

    rows = [parse_line(line, "out") for line in out.read_text().splitlines()]
    assert len(rows) == 80
    for row in rows:
        assert (row.strong, row.weak) == (
            (1.0, 0.0) if row.prompt.startswith("Prove") else (0.5, 0.5)
        )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["judge"] for line in lines} == {"judge"}
    # the judge saw each pair twice, each answer first once
    sent = fake.requests[before:]
    judged = [r.body for r in sent if r.body.get("model") == "judge-up"]
    assert len(judged) == 160
    firsts = first_answers(judged)
    assert firsts == {"careful": 80, "quick": 80}
    # the answers were capped, the judge at temperature 0
    answers = [r.body for r in sent if r.body.get("model") in ("big-up", "small-up")]
    assert len(answers) == 160 and all(a.get("max_tokens") == 1024 for a in answers)
    assert all(j.get("temperature") == 0 for j in judged)

    scorer_path = tmp_path / "mine.bin"
    code = main(
        ["route", "train", "--data", str(out), "--out", str(scorer_path), "--without-shipped"]
    )
    assert code == 0, capsys.readouterr().out
    scorer = load_scorer(str(scorer_path))
    fresh = proofs_and_greetings(40, seed=99)
    hard = [scorer.score(p) for p in fresh if p.startswith("Prove")]
    easy = [scorer.score(p) for p in fresh if p.startswith("Say")]
    assert min(hard) > max(easy)


def first_answers(judged: list[dict[str, Any]]) -> dict[str, int]:
    """How often each kind of answer was shown to the judge first."""
    out: dict[str, int] = {}
    for body in judged:
        shown_first = body["messages"][-1]["content"].split("[Assistant A's answer]")[1]
        kind = "careful" if "careful" in shown_first.split("[End of")[0] else "quick"
        out[kind] = out.get(kind, 0) + 1
    return out


def test_a_positional_judge_gives_ties_and_a_silent_one_leaves_the_request_unlabelled(
    gateway: GatewayProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    data = requests_file(tmp_path, ["Prove this, biased judge", "Prove it, mute judge", "Prove x"])
    out = tmp_path / "labelled.jsonl"
    assert label(gateway, data, out) == 1
    printed = capsys.readouterr().out
    lines = {line["id"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert set(lines) == {"r0", "r2"}
    assert lines["r0"]["strong_quality"] == 0.5 and lines["r0"]["verdicts"] == ["A", "A"]
    assert lines["r2"]["strong_quality"] == 1.0 and lines["r2"]["verdicts"] == ["A", "B"]
    assert "both answer orders agreed on 1 (50%)" in printed
    assert "1 x judge (judge): no [[A]], [[B]] or [[C]] in either order" in printed
    assert "run the same command again" in printed


def test_a_judge_call_that_fails_leaves_the_request_unlabelled(
    gateway: GatewayProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A verdict from one order alone would keep the judge's position bias. The judge is
    named by its alias here: the gateway answers under the catalog name, no fallback."""
    monkeypatch.setenv(KEY_ENV, KEY)
    data = requests_file(tmp_path, ["Prove a, judge-declines", "Prove b"])
    out = tmp_path / "labelled.jsonl"
    code = main(
        [
            *("route", "label", "--data", str(data), "--out", str(out)),
            *("--base-url", gateway.base_url, "--api-key-env", KEY_ENV),
            *("--strong", "big", "--weak", "small", "--judge", "referee"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 1
    assert re.search(r"1 x judge \(referee\): 400 .*will not read this", printed), printed
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["r1"]


def test_an_out_file_of_other_labels_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = requests_file(tmp_path, ["Prove a"])
    out = tmp_path / "mmlu.jsonl"
    other = json.dumps({"id": "m1", "prompt": "q", "strong_correct": True, "weak_correct": False})
    out.write_text(other + "\n")
    assert label(None, data, out, base_url="http://127.0.0.1:9/v1") == 1
    assert f"--out {out}:1: not a line `route label` wrote" in capsys.readouterr().err
    assert out.read_text() == other + "\n"


def test_a_failing_model_is_reported_and_a_rerun_labels_only_what_is_missing(
    gateway: GatewayProcess,
    fake: OpenAIFake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    prompts = ["Prove one", "Say two", "Prove three, refuse please", "Say four"]
    data = requests_file(tmp_path, prompts)
    out = tmp_path / "labelled.jsonl"
    assert label(gateway, data, out) == 1
    printed = capsys.readouterr().out
    assert re.search(r"1 x weak \(small\): 400 .*too long for the model", printed), printed
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == [
        "r0",
        "r1",
        "r3",
    ]

    # a run killed while writing left half a line: it is dropped and labelled again
    first = out.read_text().splitlines()
    out.write_text("\n".join(first[:2]) + "\n" + first[2][:15])
    prompts[2] = "Prove three"
    data = requests_file(tmp_path, prompts)
    before = len(fake.requests)
    assert label(gateway, data, out) == 0
    captured = capsys.readouterr()
    assert "dropped its last line, cut short" in captured.err
    assert "labelled 2 requests this run; 4 of 4" in captured.out
    ids = sorted(json.loads(line)["id"] for line in out.read_text().splitlines())
    assert ids == ["r0", "r1", "r2", "r3"]
    assert len(fake.requests) - before == 8  # two requests, four calls each

    before = len(fake.requests)
    assert label(gateway, data, out) == 0
    assert "labelled 0 requests this run; 4 of 4" in capsys.readouterr().out
    assert len(fake.requests) == before


def test_a_limit_draws_its_sample_from_the_whole_input_and_a_rerun_draws_the_rest(
    gateway: GatewayProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    data = requests_file(tmp_path, [f"Say hi to number {i}" for i in range(60)])
    out = tmp_path / "labelled.jsonl"

    def labelled() -> list[int]:
        return sorted(int(json.loads(line)["id"][1:]) for line in out.read_text().splitlines())

    assert label(gateway, data, out, "--limit", "8") == 0  # the rest wait for a later run
    assert "52 requests not started" in capsys.readouterr().out
    first = labelled()
    assert len(first) == 8 and max(first) >= 8  # not simply the first eight lines
    assert label(gateway, data, out, "--limit", "52") == 0
    assert "labelled 52 requests this run; 60 of 60" in capsys.readouterr().out
    assert labelled() == list(range(60))


def test_a_wrong_key_stops_the_run_early_without_printing_the_key(
    gateway: GatewayProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(KEY_ENV, "gw-not-a-key-of-ours")
    data = requests_file(tmp_path, proofs_and_greetings(30))
    out = tmp_path / "labelled.jsonl"
    assert label(gateway, data, out, "--concurrency", "2") == 1
    printed = capsys.readouterr().out
    assert "stopped early: " in printed and "401" in printed and f"${KEY_ENV}" in printed
    assert "gw-not-a-key-of-ours" not in printed
    # the requests in flight when the 401 came back finish; the rest are not started
    assert re.search(r"(2[6-9]|30) requests not started", printed), printed
    assert out.read_text() == ""


def test_an_endpoint_that_is_busy_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Straight at an OpenAI-compatible endpoint (no gateway): a 429 is retried after its
    Retry-After, a 503 after the backoff; the label comes out whole."""
    monkeypatch.setenv(KEY_ENV, "sk-upstream")
    waits = record_waits(monkeypatch)

    with OpenAIFake(responder=direct) as direct_fake:
        direct_fake.enqueue(
            Reply.error(429, "slow down", headers={"retry-after": "2"}),
            Reply.error(503, "busy"),
        )
        data = requests_file(tmp_path, ["Prove the lemma"])
        out = tmp_path / "labelled.jsonl"
        code = label(None, data, out, "--concurrency", "1", base_url=direct_fake.base_url)
        assert code == 0, capsys.readouterr().out
        assert len(direct_fake.requests) == 6  # two refused, then two answers and two verdicts
        assert all(r.headers["authorization"] == "Bearer sk-upstream" for r in direct_fake.requests)
    line = json.loads(out.read_text())
    assert line["strong_quality"] == 1.0 and line["verdicts"] == ["A", "B"]
    # the strong and the weak call ran side by side, one refused each way
    assert sorted(waits) == [route_label.FIRST_BACKOFF_SECONDS, 2.0]


def record_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The label command's waits between attempts, recorded instead of slept."""
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(route_label, "pause", no_sleep)
    return waits


def direct(request: dict[str, Any]) -> Reply | None:
    """`respond`, for the catalog names a client sends straight to the fake."""
    renamed = {"big": "big-up", "small": "small-up", "judge": "judge-up"}
    return respond({**request, "model": renamed.get(request.get("model", ""), "")})


@pytest.mark.parametrize(
    ("refusal", "reason"),
    [
        (
            Reply.error(429, "daily limit", headers={"retry-after": "3600"}),
            "(asked to wait 3600 s)",
        ),
        (
            Reply(
                status=429,
                body={"error": {"message": "budget spent", "code": "insufficient_quota"}},
            ),
            "429 insufficient_quota: budget spent",
        ),
    ],
)
def test_a_refusal_no_short_wait_lifts_stops_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    refusal: Reply,
    reason: str,
) -> None:
    waits = record_waits(monkeypatch)
    with OpenAIFake(responder=direct) as direct_fake:
        direct_fake.enqueue(refusal)
        data = requests_file(tmp_path, ["Prove a", "Prove b", "Prove c"])
        out = tmp_path / "labelled.jsonl"
        code = label(None, data, out, "--concurrency", "1", base_url=direct_fake.base_url)
    printed = capsys.readouterr().out
    assert code == 1
    assert "stopped early: " in printed and reason in printed
    assert "2 requests not started" in printed
    assert waits == []  # refused at once, not waited on


def test_the_access_log_of_real_traffic_is_the_input(
    gateway: GatewayProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With `server.log_content: true` the gateway's access log keeps each request's
    messages; `--from-access-log` labels each distinct answered conversation on a route."""
    monkeypatch.setenv(KEY_ENV, KEY)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)
    earlier = len(gateway.log())  # other tests' traffic: not this test's input

    def ask(route: str, messages: list[dict[str, str]]) -> str:
        raw = client.chat.completions.with_raw_response.create(
            model=route,
            messages=messages,  # type: ignore[arg-type]
        )
        return raw.headers["x-request-id"]

    follow_up = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "Prove it was a greeting, log-test"},
    ]
    first = ask("chat", [{"role": "user", "content": "Prove the log-test lemma"}])
    ask("chat", [{"role": "user", "content": "Prove the log-test lemma"}])  # a repeat
    second = ask("chat", follow_up)
    hi = ask("big", [{"role": "user", "content": "Say hi, log-test on another route"}])
    with pytest.raises(openai.BadRequestError):
        ask("chat", [{"role": "user", "content": "refuse me, log-test"}])  # small-up refuses
    assert wait_for(lambda: second in gateway.log() and "refuse me" in gateway.log())
    log = tmp_path / "access.log"
    log.write_text(gateway.log()[earlier:])

    out = tmp_path / "labelled.jsonl"
    code = main(
        [
            *("route", "label", "--from-access-log", str(log), "--route", "chat"),
            *("--out", str(out), "--base-url", gateway.base_url, "--api-key-env", KEY_ENV),
            *MODELS,
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured
    assert "distinct requests to label from the access log" in captured.err
    assert "x a repeat of an earlier conversation" in captured.err
    assert "x not answered (status not 200)" in captured.err
    assert "x another route than chat" in captured.err
    lines = {line["id"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert set(lines) == {first, second}
    mine = lines
    assert mine[first]["prompt"] == "Prove the log-test lemma"
    assert mine[first]["strong_quality"] == 1.0
    assert mine[second]["turns"] == ["Say hello", "Prove it was a greeting, log-test"]

    # the log now also holds the labeller's own calls: its answers repeat the labelled
    # conversations and its judge calls are told apart, so nothing new is found
    two_orders = 2 * len(lines)
    assert wait_for(lambda: gateway.log()[earlier:].count("[Assistant A's answer]") >= two_orders)
    log.write_text(gateway.log()[earlier:])
    again = tmp_path / "again.jsonl"
    code = main(
        [
            *("route", "label", "--from-access-log", str(log), "--out", str(again)),
            *("--base-url", gateway.base_url, "--api-key-env", KEY_ENV, *MODELS),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured
    assert f"{two_orders} x this command's own judge call" in captured.err
    labelled_again = [json.loads(line)["id"] for line in again.read_text().splitlines()]
    assert sorted(labelled_again) == sorted([first, second, hi])


def test_a_request_in_another_api_is_logged_as_chat_messages(gateway: GatewayProcess) -> None:
    """Content logging sits in the pipeline, not in a handler: an Anthropic Messages
    request (the anthropic SDK, as Claude Code sends it) logs its system prompt and turns
    in chat form, the same input `--from-access-log` reads."""
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0)
    raw = claude.messages.with_raw_response.create(
        model="chat",
        max_tokens=20,
        system="answer in one line",
        messages=[{"role": "user", "content": "Prove the anthropic log-test lemma"}],
    )
    request_id = raw.headers["x-request-id"]
    assert wait_for(lambda: request_id in gateway.log())
    line = next(
        json.loads(text)
        for text in gateway.log().splitlines()
        if request_id in text and '"logger":"gateway.access"' in text
    )
    assert line["content"]["messages"] == [
        {"role": "system", "content": "answer in one line"},
        {"role": "user", "content": "Prove the anthropic log-test lemma"},
    ]


def test_attachments_are_logged_as_a_note_of_their_size_and_not_labelled(
    gateway: GatewayProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An inline image, audio clip or file is hundreds of kilobytes of base64: the line
    keeps the conversation's text and each part's type, and a note of the payload's
    size in its place; `--from-access-log` leaves such a request out (the models would
    be asked about an attachment the log no longer holds)."""
    client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)
    image = "A" * 300_000
    audio = "B" * 50_000
    pdf = "C" * 80_000
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Describe these, attachment log-test"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                    {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                    {
                        "type": "file",
                        "file": {
                            "filename": "a.pdf",
                            "file_data": f"data:application/pdf;base64,{pdf}",
                        },
                    },
                ],
            }
        ],
    )
    request_id = raw.headers["x-request-id"]
    assert wait_for(lambda: request_id in gateway.log())
    text = next(
        line
        for line in gateway.log().splitlines()
        if request_id in line and '"logger":"gateway.access"' in line
    )
    assert len(text) < 5_000
    parts = json.loads(text)["content"]["messages"][0]["content"]
    assert parts == [
        {"type": "text", "text": "Describe these, attachment log-test"},
        {
            "type": "image_url",
            "image_url": {
                "url": "data:image/png;base64,<omitted by the access log: 300000 characters>"
            },
        },
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {
            "type": "input_audio",
            "input_audio": {
                "data": "<omitted by the access log: 50000 characters>",
                "format": "wav",
            },
        },
        {
            "type": "file",
            "file": {
                "filename": "a.pdf",
                "file_data": "<omitted by the access log: 80028 characters>",
            },
        },
    ]

    log = tmp_path / "access.log"
    log.write_text(text + "\n")
    code = main(
        [
            *("route", "label", "--from-access-log", str(log), "--out", str(tmp_path / "o.jsonl")),
            *MODELS,
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "1 x an image, audio or file the log did not keep" in err


def test_an_access_log_without_content_says_how_to_turn_it_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "access.log"
    entry = {"logger": "gateway.access", "msg": "request", "request_id": "r", "status": 200}
    log.write_text("gateway starting\n" + json.dumps(entry) + "\n")
    code = main(
        [
            "route",
            "label",
            "--from-access-log",
            str(log),
            "--out",
            str(tmp_path / "o.jsonl"),
            *MODELS,
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "no request to label" in err
    assert "1 x no messages (is server.log_content on?)" in err
    assert "1 x not a JSON line" in err


# --- input it refuses before sending anything --------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), 'expected an "id"'),
        (json.dumps({"id": "a"}), 'expected "messages"'),
        (json.dumps({"id": "a", "messages": [{"role": "wizard"}]}), "not valid chat messages"),
        (
            json.dumps(
                {
                    "id": "a",
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "hello"},
                    ],
                }
            ),
            "must end with a user message",
        ),
        (json.dumps({"id": "a", "prompt": "  "}), "has no text"),
        (json.dumps({"id": "a", "prompt": "hi", "source": 3}), '"source" must be a string'),
    ],
)
def test_a_bad_request_line_is_named_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    with OpenAIFake() as silent:
        data = tmp_path / "requests.jsonl"
        data.write_text(json.dumps({"id": "ok", "prompt": "fine"}) + "\n" + line + "\n")
        code = label(None, data, tmp_path / "out.jsonl", base_url=silent.base_url)
        assert silent.requests == []
    err = capsys.readouterr().err
    assert code == 1
    assert f"{data}:2: " in err and message in err


def test_repeated_ids_and_bad_options_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "requests.jsonl"
    data.write_text(
        json.dumps({"id": 1, "prompt": "a"}) + "\n" + json.dumps({"id": 1, "prompt": "b"}) + "\n"
    )
    assert label(None, data, tmp_path / "o.jsonl", base_url="http://127.0.0.1:9/v1") == 1
    assert "id 1 repeats" in capsys.readouterr().err
    data.write_text(json.dumps({"id": 1, "prompt": "a"}) + "\n")
    for extra, message in (
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--max-tokens", "0"], "--max-tokens must be at least 1"),
    ):
        code = label(None, data, tmp_path / "o.jsonl", *extra, base_url="http://127.0.0.1:9/v1")
        assert code == 1 and message in capsys.readouterr().err
    code = label(None, data, tmp_path / "o.jsonl", base_url="127.0.0.1:9")
    assert code == 1 and "expected an http:// or https:// URL" in capsys.readouterr().err


def test_an_endpoint_that_cannot_be_reached_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    waits = record_waits(monkeypatch)
    data = requests_file(tmp_path, ["Prove a", "Prove b", "Prove c"])
    out = tmp_path / "o.jsonl"
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    assert label(None, data, out, "--concurrency", "1", base_url=nowhere) == 1
    printed = capsys.readouterr().out
    assert "stopped early: strong (big): cannot reach the endpoint (ConnectError)" in printed
    assert "2 requests not started" in printed
    # the strong and the weak call each asked again before giving up
    assert len(waits) == 2 * (route_label.ATTEMPTS - 1)
