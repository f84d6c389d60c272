"""The shipped chat labels (data/routing/alpaca_eval.jsonl) and the chat bench's maths."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from gateway.training.fitting import apgr, strong_share_at
from gateway.training.labelled import parse_lines
from tests.routing.learned_support import REPO

CHAT = REPO / "data" / "routing" / "alpaca_eval.jsonl"


def test_the_chat_rows_hold_every_alpaca_eval_instruction_once_with_its_source() -> None:
    items = [json.loads(line) for line in CHAT.read_text().splitlines()]
    assert len({i["prompt"] for i in items}) == len(items) == 805
    assert Counter(i["source"] for i in items) == {
        "selfinstruct": 252,
        "oasst": 188,
        "koala": 156,
        "helpful_base": 129,
        "vicuna": 80,
    }
    for item in items:
        # the two-tier pair is the judged Mixtral verdict, seen from both sides
        assert item["weak_quality"] == item["judged"]["Mixtral-8x7B-Instruct-v0.1"]
        assert item["strong_quality"] + item["weak_quality"] == 1.0


def test_chat_rows_parse_with_their_source_and_pairwise_quality() -> None:
    rows = parse_lines(CHAT.read_text().splitlines()[:3], "chat")
    assert [r.origin for r in rows] == [r.source for r in rows]
    assert all(r.benchmark == "alpaca_eval" and r.strong + r.weak == 1.0 for r in rows)
    plain = parse_lines(['{"id": "x", "prompt": "p", "strong_correct": 1, "weak_correct": 0}'], "x")
    assert plain[0].origin == "custom"


def test_apgr_is_one_half_for_a_constant_score_and_one_for_the_true_gain() -> None:
    rng = np.random.default_rng(1)
    strong = rng.integers(0, 2, 200).astype(float)
    weak = rng.integers(0, 2, 200).astype(float)
    gain = strong - weak
    assert apgr(np.zeros(200), gain) == pytest.approx(0.5)
    assert apgr(gain, gain) > apgr(rng.random(200), gain)
    assert apgr(-gain, gain) < 0.5


def test_the_strong_share_at_95_is_the_first_share_reaching_it() -> None:
    strong = np.array([1.0, 1.0, 1.0, 1.0])
    weak = np.array([0.0, 1.0, 1.0, 1.0])
    # the one prompt the weak model misses ranked first: one strong call of four
    assert strong_share_at(np.array([0.9, 0.1, 0.2, 0.3]), strong, weak) == 0.25
    # ranked last: 95% of 1.0 needs that prompt, so all four
    assert strong_share_at(np.array([0.0, 0.1, 0.2, 0.3]), strong, weak) == 1.0


def test_the_prompt_shape_features_name_every_value_and_read_the_prompts_form() -> None:
    from bench.prompt_shape import FEATURES, shape

    question = dict(zip(FEATURES, shape("Why is the sky blue?"), strict=True))
    task = dict(zip(FEATURES, shape("Rewrite this:\nThe cat sat on the mat."), strict=True))
    assert question["starts with a question word"] == 1.0 and question["ends with ?"] == 1.0
    assert task["starts with a question word"] == 0.0 and task["has :"] == 1.0
    assert task["log lines"] > question["log lines"] == 0.0


def test_the_prompt_shape_head_recovers_a_soft_target_and_shrinks_under_a_big_penalty() -> None:
    from bench.prompt_shape import ShapeHead

    rng = np.random.default_rng(7)
    x = rng.normal(size=(400, 3))
    target = 1.0 / (1.0 + np.exp(-(2.0 * x[:, 0] - x[:, 1])))
    fitted = ShapeHead(l2=1e-4).fit(x, target).logits(x)
    assert np.corrcoef(fitted, 2.0 * x[:, 0] - x[:, 1])[0, 1] > 0.99
    shrunk = ShapeHead(l2=100.0).fit(x, target).logits(x)
    assert np.ptp(shrunk) < 0.1 * np.ptp(fitted)


ROUTING = REPO / "data" / "routing"
OA = ROUTING / "oa_qlora.jsonl"
HELLO = ROUTING / "hellobench.jsonl"


def _items(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _normalised(prompt: str) -> str:
    return " ".join(prompt.split()).casefold()


def test_the_oa_rows_are_unique_parse_and_split_the_pairwise_verdicts() -> None:
    items = _items(OA)
    assert len({i["id"] for i in items}) == len({i["prompt"] for i in items}) == len(items)
    assert Counter(i["source"] for i in items) == {"oa_qlora": 762}
    assert sum(i["lang"] == "en" for i in items) == 231
    rows = parse_lines(OA.read_text().splitlines(), "oa_qlora")
    assert len(rows) == 762 and all(r.benchmark == "oa_qlora" for r in rows)
    for item in items:
        assert 0.0 <= item["strong_quality"] <= 1.0 and 0.0 <= item["weak_quality"] <= 1.0
        assert item["strong_quality"] + item["weak_quality"] == 1.0
        valid = [v for v in item["verdicts"].values() if v is not None]
        assert valid and item["strong_quality"] == sum(valid) / len(valid)
        # the prompt a router scores is the conversation's last human turn
        assert item["prompt"] == item["turns"][-1]


def test_the_hellobench_rows_are_unique_parse_and_take_the_pair_from_judged() -> None:
    items = _items(HELLO)
    assert len({i["id"] for i in items}) == len({i["prompt"] for i in items}) == len(items)
    assert Counter(i["source"] for i in items) == {
        "hellobench_open_ended_qa": 200,
        "hellobench_summarization": 100,
        "hellobench_chat": 147,
        "hellobench_text_completion": 77,
        "hellobench_heuristic_text_generation": 123,
    }
    rows = parse_lines(HELLO.read_text().splitlines(), "hellobench")
    assert len(rows) == 647 and all(r.benchmark == "hellobench" for r in rows)
    for item in items:
        assert len(item["judged"]) == 23
        assert all(v is None or 0.0 <= v <= 1.0 for v in item["judged"].values())
        assert item["strong_quality"] == item["judged"]["gpt4o_0806"]
        assert item["weak_quality"] == item["judged"]["llama31_8b"]


@pytest.mark.parametrize("path", [OA, HELLO], ids=["oa_qlora", "hellobench"])
def test_no_new_chat_prompt_repeats_another_routing_file(path) -> None:
    others = {
        _normalised(item["prompt"])
        for other in sorted(ROUTING.glob("*.jsonl"))
        if other != path
        for item in _items(other)
    }
    repeats = [i["id"] for i in _items(path) if _normalised(i["prompt"]) in others]
    assert repeats == []


def test_each_chat_row_gets_a_soft_target_from_its_own_kind_of_judgment() -> None:
    from bench.chat_holdout import chat_targets, load_chat_training, other_models_difficulty

    rows = load_chat_training()
    targets = chat_targets(rows)
    hello = other_models_difficulty("hellobench")
    by_id = {json.loads(line)["id"]: json.loads(line) for line in
             (REPO / "data" / "routing" / "hellobench.jsonl").read_text().splitlines()}  # fmt: skip
    for row, value in zip(rows, targets, strict=True):
        if row.benchmark in ("mmlu", "gsm8k"):
            assert np.isnan(value)
        elif row.benchmark == "oa_qlora":
            assert value == row.strong  # the pair's own verdict
        elif row.benchmark == "mt_bench":
            gap = np.clip((row.strong - row.weak) / 0.15, -1, 1)
            assert value == pytest.approx(0.5 + 0.5 * gap)
        elif row.benchmark == "hellobench":
            judged = by_id[row.id]["judged"]
            mine = judged["gpt4o_0806"]
            others = [v for m, v in judged.items() if m != "gpt4o_0806" and v is not None]
            lost = sum(1.0 if v < mine else 0.5 if v == mine else 0.0 for v in others)
            assert value == hello[row.id] == pytest.approx(lost / len(others))
        assert np.isnan(value) or 0.0 <= value <= 1.0
