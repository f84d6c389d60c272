"""A gated scorer: a base logit, plus an addition that counts only where the gates say
the prompt is not an exam question (gateway/routing/learned/gated.py)."""

from __future__ import annotations

import json
import math
from array import array
from pathlib import Path
from typing import Any

import pytest

from gateway.routing.learned.gated import GatedScorer
from gateway.routing.learned.text_features import FeatureSpec
from gateway.routing.learned.weights import LinearScorer, WeightsError, encode, load_scorer

SMALL = FeatureSpec(buckets=1 << 6)
WORDS_ONLY = FeatureSpec(buckets=0)


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def write_parts(directory: Path) -> None:
    """base: n-grams; addition: a word table; gates: an n-gram one and a word one."""
    ngram_weights = array("f", [0.1 * ((i % 7) - 3) for i in range(SMALL.buckets)])
    (directory / "base.bin").write_bytes(encode("base", SMALL, -0.3, ngram_weights, {}))
    chat = {"poem": 2.0, "story": 1.5, "solve": -1.0, "which": -0.5}
    (directory / "chat.bin").write_bytes(encode("chat", WORDS_ONLY, 0.2, array("f"), {}, chat))
    exam_ngrams = array("f", [0.05 * ((i % 5) - 2) for i in range(SMALL.buckets)])
    (directory / "exam-ngrams.bin").write_bytes(encode("en", SMALL, -1.0, exam_ngrams, {}))
    exam_words = {"which": 6.0, "following": 6.0, "poem": -2.0}
    (directory / "exam-words.bin").write_bytes(
        encode("ew", WORDS_ONLY, -1.0, array("f"), {}, exam_words)
    )


def composite(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": "gateway-gated-scorer",
        "version": 1,
        "name": "mixed",
        "base": "base",
        "addition": "chat",
        "gates": ["exam-ngrams", "exam-words"],
        "weight": 2.0,
        "power": 4,
        "trained_on": "test",
    }
    doc.update(overrides)
    return doc


@pytest.fixture
def gated_path(tmp_path: Path) -> Path:
    write_parts(tmp_path)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(composite()))
    return path


def part(directory: Path, name: str) -> LinearScorer:
    found = load_scorer(str(directory / f"{name}.bin"))
    assert isinstance(found, LinearScorer)
    return found


@pytest.mark.parametrize(
    "text",
    ["Write a poem about the sea", "Which of the following is a prime? A. 4 B. 7", "hello", ""],
)
def test_the_logit_is_the_base_plus_the_gated_addition(gated_path: Path, text: str) -> None:
    scorer = load_scorer(str(gated_path))
    assert isinstance(scorer, GatedScorer)
    directory = gated_path.parent
    base, chat = part(directory, "base"), part(directory, "chat")
    gate = max(part(directory, g).score(text) for g in ("exam-ngrams", "exam-words"))

    expected = logit(base.score(text)) + 2.0 * (1 - gate) ** 4 * logit(chat.score(text))

    assert logit(scorer.score(text)) == pytest.approx(expected, abs=1e-6)
    assert scorer.score_many([text, text]) == [scorer.score(text)] * 2
    assert scorer.name == "mixed" and scorer.header["trained_on"] == "test"


def test_an_exam_question_is_scored_by_the_base_alone(gated_path: Path) -> None:
    scorer = load_scorer(str(gated_path))
    base = part(gated_path.parent, "base")
    question = "Which of the following is following which"  # the word gate is sure

    assert logit(scorer.score(question)) == pytest.approx(logit(base.score(question)), abs=1e-4)
    # an open request is not: the word table moves it
    request = "Write a poem and a story"
    assert abs(logit(scorer.score(request)) - logit(base.score(request))) > 0.5


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("not json", "not JSON"),
        (json.dumps({"format": "something-else", "version": 1}), "not a gated scorer"),
        (json.dumps(composite(version=2)), "not a gated scorer"),
        (json.dumps({k: v for k, v in composite().items() if k != "gates"}), "missing gates"),
        (json.dumps(composite(gates=[])), "gates a non-empty list"),
        (json.dumps(composite(base=3)), "must be scorer names"),
        (json.dumps(composite(weight="2")), "must be numbers"),
        (json.dumps(composite(power=-1)), "power a finite number >= 0"),
        (json.dumps([1, 2]), "bad magic"),
    ],
)
def test_a_malformed_composite_is_a_weights_error_with_the_reason(
    tmp_path: Path, content: str, reason: str
) -> None:
    write_parts(tmp_path)
    path = tmp_path / "bad.json"
    path.write_text(content if content.startswith(("{", "[")) else "{" + content)

    with pytest.raises(WeightsError, match=reason):
        load_scorer(str(path))


def test_a_missing_part_or_a_composite_part_is_refused(tmp_path: Path) -> None:
    write_parts(tmp_path)
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps(composite(addition="nowhere")))
    with pytest.raises(WeightsError, match=r"cannot read router weights .*nowhere\.bin"):
        load_scorer(str(missing))

    (tmp_path / "inner.json").write_text(json.dumps(composite()))
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps(composite(base="inner.json")))
    with pytest.raises(WeightsError, match="is not a router weights file"):
        load_scorer(str(nested))


def test_a_retrained_part_is_served_on_the_next_load(gated_path: Path) -> None:
    text = "Write a poem"
    before = load_scorer(str(gated_path)).score(text)
    directory = gated_path.parent
    louder = {"poem": 6.0}
    (directory / "chat.bin").write_bytes(encode("chat", WORDS_ONLY, 0.2, array("f"), {}, louder))

    after = load_scorer(str(gated_path)).score(text)

    gate = max(part(directory, g).score(text) for g in ("exam-ngrams", "exam-words"))
    # the word table's logit for "poem" went from 0.2 + 2.0 to 0.2 + 6.0
    assert logit(after) - logit(before) == pytest.approx(2.0 * (1 - gate) ** 4 * 4.0, abs=1e-5)


def shipped_prompts(name: str, count: int) -> list[str]:
    path = Path(__file__).resolve().parents[2] / "data" / "routing" / f"{name}.jsonl"
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line)["prompt"] for _, line in zip(range(count), lines, strict=False)]


def test_the_shipped_gated_scorer_keeps_exam_questions_on_the_ngrams() -> None:
    scorer = load_scorer("ngram-chat-v1")
    assert isinstance(scorer, GatedScorer)
    base = load_scorer("ngram-v1")
    assert scorer.base is base and scorer.addition is load_scorer("chat-words-v1")
    assert [gate.name for gate in scorer.gates] == ["exam-ngrams-v1", "exam-words-v1"]

    def moved(prompts: list[str]) -> list[float]:
        return [abs(logit(scorer.score(p)) - logit(base.score(p))) for p in prompts]

    # an exam question's score is the n-grams' own; an open request is moved by the words
    exam = moved(shipped_prompts("mmlu", 30) + shipped_prompts("gsm8k", 30))
    chat = moved(shipped_prompts("alpaca_eval", 60))
    assert sum(m < 0.01 for m in exam) >= 55
    assert sum(m > 0.1 for m in chat) >= 40
