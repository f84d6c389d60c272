"""A scorer's word table: one number a word, averaged over the prompt's known words and
added to the logit (how a head on static word vectors is served without them)."""

from __future__ import annotations

import json
import math
import struct
from array import array
from pathlib import Path

import pytest

from gateway.routing.learned.text_features import FeatureSpec
from gateway.routing.learned.weights import MAGIC, WeightsError, encode, load_scorer

WORDS_ONLY = FeatureSpec(buckets=0)


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def write(tmp_path: Path, table: dict[str, float], bias: float = -0.5, name: str = "w") -> Path:
    path = tmp_path / f"{name}.bin"
    path.write_bytes(encode(name, WORDS_ONLY, bias, array("f"), {"source": "test"}, table))
    return path


def test_the_logit_is_the_bias_plus_the_mean_over_known_words_in_any_script(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, {"prove": 2.0, "theorem": 1.0, "привет": -1.5, "数学": 0.5})
    scorer = load_scorer(str(path))

    # case and punctuation do not matter; "the" and "a" are not in the table
    assert logit(scorer.score("Prove the THEOREM, a")) == pytest.approx(-0.5 + 1.5, abs=1e-6)
    assert logit(scorer.score("привет!")) == pytest.approx(-0.5 - 1.5, abs=1e-6)
    assert logit(scorer.score("数学")) == pytest.approx(-0.5 + 0.5, abs=1e-6)
    # no known word: the bias alone
    assert logit(scorer.score("hello there")) == pytest.approx(-0.5, abs=1e-6)
    assert scorer.header["source"] == "test" and scorer.header["words"] == 4


def test_a_table_beside_ngram_weights_adds_to_them(tmp_path: Path) -> None:
    spec = FeatureSpec(buckets=1 << 4)
    ngrams = array("f", [0.25] * spec.buckets)
    path = tmp_path / "both.bin"
    path.write_bytes(encode("both", spec, 0.0, ngrams, {}, {"prove": 3.0}))
    without = tmp_path / "ngrams.bin"
    without.write_bytes(encode("ngrams", spec, 0.0, ngrams, {}))

    both, alone = load_scorer(str(path)), load_scorer(str(without))

    assert alone.word_values is None
    text = "prove it"
    assert logit(both.score(text)) == pytest.approx(logit(alone.score(text)) + 3.0, abs=1e-5)


def test_a_damaged_word_table_is_refused_with_the_reason(tmp_path: Path) -> None:
    data = write(tmp_path, {"alpha": 1.0, "beta": 2.0}).read_bytes()
    for cut in (1, 3, 10, 14):  # into the last word, every word, into the values
        short = tmp_path / f"short{cut}.bin"
        short.write_bytes(data[:-cut])
        with pytest.raises(WeightsError, match="truncated"):
            load_scorer(str(short))
    garbled = tmp_path / "garbled.bin"
    garbled.write_bytes(data[: data.rindex(b"alpha")] + b"\xff\xfe\xfd\xfc\xfb\nbeta")
    assert len(garbled.read_bytes()) == len(data)
    with pytest.raises(WeightsError, match="not UTF-8"):
        load_scorer(str(garbled))
    merged = tmp_path / "merged.bin"
    merged.write_bytes(data[: data.rindex(b"alpha")] + b"alpha beta")
    with pytest.raises(WeightsError, match="1 words for 2 values"):
        load_scorer(str(merged))


def test_words_must_be_one_line_each() -> None:
    with pytest.raises(ValueError, match="one line"):
        encode("w", WORDS_ONLY, 0.0, array("f"), {}, {"two\nlines": 1.0})


def test_the_shipped_chat_scorer_is_a_word_table_in_every_script() -> None:
    scorer = load_scorer("chat-words-v1")
    table = scorer.word_values
    assert table is not None and scorer.spec.buckets == 0
    assert scorer.header["words"] == len(table) > 40_000
    # words of several scripts are in it (OA's prompts are 70% not English)
    for word in ("write", "функцию", "escribe", "función"):
        assert word in table
    text = "Напиши функцию сортировки"
    known = [table[w] for w in ("напиши", "функцию", "сортировки") if w in table]
    assert len(known) >= 2
    expected = scorer.bias + sum(known) / len(known)
    assert logit(scorer.score(text)) == pytest.approx(expected, abs=1e-5)


def header_file(tmp_path: Path, header: dict[str, object], body: bytes) -> Path:
    head = json.dumps(header).encode()
    path = tmp_path / "crafted.bin"
    path.write_bytes(MAGIC + len(head).to_bytes(4, "little") + head + body)
    return path


SPEC = {"buckets": 0, "head_chars": 10, "tail_chars": 10, "word_ngrams": 1}


@pytest.mark.parametrize(
    ("changes", "body"),
    [
        ({"word_bytes": None}, b"\0\0\0\0a"),
        ({"word_bytes": "1"}, b"\0\0\0\0a"),
        ({"word_bytes": 1.0}, b"\0\0\0\0a"),
        ({"word_bytes": True}, b"\0\0\0\0a"),
        ({"words": True}, b"\0\0\0\0a"),
        ({"words": 0, "word_bytes": 0}, b""),
        ({"word_bytes": 10**400}, b"\0\0\0\0a"),
        ({"bias": 1e400}, b"\0\0\0\0a"),
        ({"spec": [1, 2]}, b"\0\0\0\0a"),
        ({"spec": {**SPEC, "buckets": -1}, "word_bytes": 3}, b"\0" * 7),
        ({"word_bytes": 0}, b"\0\0\0\0"),  # one empty word
        ({}, b"\0\0\xc0\x7fa"),  # a NaN value
    ],
)
def test_a_crafted_header_is_a_weights_error_never_a_crash(
    tmp_path: Path, changes: dict[str, object], body: bytes
) -> None:
    """A route whose file fails to load falls back; any other exception would stop the
    gateway from starting or a policy reload half-way."""
    header = {"name": "x", "bias": 0, "spec": SPEC, "words": 1, "word_bytes": 1, **changes}
    with pytest.raises(WeightsError):
        load_scorer(str(header_file(tmp_path, header, body)))


def test_encode_refuses_what_decode_would() -> None:
    with pytest.raises(ValueError, match="at least one word"):
        encode("w", WORDS_ONLY, 0.0, array("f"), {}, {})
    with pytest.raises(ValueError, match="finite"):
        encode("w", WORDS_ONLY, 0.0, array("f"), {}, {"a": float("nan")})
    with pytest.raises(ValueError, match="may not include"):
        encode("w", WORDS_ONLY, 0.0, array("f"), {"words": 3})


def test_a_file_is_decoded_once_until_its_content_changes(tmp_path: Path) -> None:
    """A policy reload re-reads every scorer it names: an unchanged file is not parsed
    again (a 150,000-word table takes ~0.1 s), a retrained one is."""
    path = write(tmp_path, {"alpha": 1.0})
    first = load_scorer(str(path))
    assert load_scorer(str(path)) is first
    write(tmp_path, {"alpha": 2.0})
    second = load_scorer(str(path))
    assert second is not first and second.word_values == {"alpha": 2.0}


def test_tables_over_the_same_words_share_one_dictionary(tmp_path: Path) -> None:
    """The chat table and the exam-question gate hold the same 150,000 words: the words'
    dictionary (most of a table's memory) is built once, each table keeps its values."""
    chat = load_scorer(str(write(tmp_path, {"prove": 2.0, "poem": -1.0}, name="chat")))
    gate = load_scorer(str(write(tmp_path, {"prove": 5.0, "poem": 0.5}, name="gate")))
    other = load_scorer(str(write(tmp_path, {"prove": 1.0, "haiku": 0.5}, name="other")))
    assert chat.word_values is not None and gate.word_values is not None
    assert other.word_values is not None
    assert chat.word_values.vocabulary is gate.word_values.vocabulary
    assert other.word_values.vocabulary is not chat.word_values.vocabulary
    assert dict(chat.word_values) == {"prove": 2.0, "poem": -1.0}
    assert dict(gate.word_values) == {"prove": 5.0, "poem": 0.5}
    assert logit(gate.score("prove it")) == pytest.approx(-0.5 + 5.0, abs=1e-6)

    # the same words under a count that does not match them are refused, shared or not
    values = struct.pack("<f", 1.0)
    listed = b"poem\nprove"
    header = {"name": "x", "format": 1, "spec": SPEC, "bias": 0.0, "words": 1}
    crafted = header_file(tmp_path, {**header, "word_bytes": len(listed)}, values + listed)
    with pytest.raises(WeightsError, match="2 words for 1 values"):
        load_scorer(str(crafted))
