"""A tiny llama-architecture model with seeded random weights, written with `gguf`.

No weights can be downloaded here, and none are needed: the text such a model writes is
noise, but llama-server's slots, continuous batching, KV cache and prompt-prefix reuse
run on it exactly as on a real model, only fast enough for a CPU. The tokenizer is
llama.cpp's own vocabulary-only test file (`models/ggml-vocab-llama-spm.gguf`, the
LLaMA SentencePiece vocabulary of 32,000 tokens), so prompts tokenize as they would for
LLaMA. The same seed and shape always give the same file, byte for byte.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

ARCHITECTURE = "llama"
# ChatML, so llama-server formats chat messages without a model-specific template
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
WEIGHT_STD = 0.02


@dataclass(frozen=True, slots=True)
class Shape:
    layers: int = 2
    width: int = 128
    heads: int = 4
    kv_heads: int = 2
    feed_forward: int = 256
    context: int = 8192

    @property
    def head_width(self) -> int:
        return self.width // self.heads

    def file_name(self, seed: int) -> str:
        return (
            f"tiny-llama-l{self.layers}-w{self.width}-h{self.heads}-kv{self.kv_heads}"
            f"-ff{self.feed_forward}-seed{seed}.gguf"
        )


def tiny_model(models: Path, vocabulary: Path, seed: int = 0, shape: Shape = Shape()) -> Path:
    """The model file for `seed` and `shape` under `models/`, written if absent."""
    path = models / shape.file_name(seed)
    if not path.is_file():
        models.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        write_model(partial, vocabulary, seed, shape)
        partial.replace(path)
    return path


def write_model(path: Path, vocabulary: Path, seed: int, shape: Shape) -> None:
    tokenizer = read_tokenizer(vocabulary)
    tokens: list[str] = tokenizer["tokenizer.ggml.tokens"]
    writer = gguf.GGUFWriter(str(path), ARCHITECTURE)
    writer.add_name(f"tiny-llama-seed{seed}")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.width)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_width)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(tokens))
    add_tokenizer(writer, tokenizer)
    for name, tensor in weights(shape, len(tokens), seed):
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def read_tokenizer(vocabulary: Path) -> dict[str, Any]:
    reader = gguf.GGUFReader(str(vocabulary))
    return {
        name: field.contents()
        for name, field in reader.fields.items()
        if name.startswith("tokenizer.")
    }


def add_tokenizer(writer: gguf.GGUFWriter, tokenizer: dict[str, Any]) -> None:
    writer.add_tokenizer_model(tokenizer["tokenizer.ggml.model"])
    writer.add_tokenizer_pre(tokenizer.get("tokenizer.ggml.pre", "default"))
    writer.add_token_list(tokenizer["tokenizer.ggml.tokens"])
    writer.add_token_scores(tokenizer["tokenizer.ggml.scores"])
    writer.add_token_types(tokenizer["tokenizer.ggml.token_type"])
    writer.add_bos_token_id(tokenizer["tokenizer.ggml.bos_token_id"])
    writer.add_eos_token_id(tokenizer["tokenizer.ggml.eos_token_id"])
    writer.add_unk_token_id(tokenizer["tokenizer.ggml.unknown_token_id"])
    writer.add_add_bos_token(tokenizer.get("tokenizer.ggml.add_bos_token", True))
    writer.add_add_eos_token(tokenizer.get("tokenizer.ggml.add_eos_token", False))
    writer.add_chat_template(CHAT_TEMPLATE)


def weights(shape: Shape, vocabulary: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """Every tensor of the llama graph, in GGUF's naming; numpy shapes are (out, in)."""
    rng = np.random.default_rng(seed)

    def matrix(rows: int, columns: int) -> np.ndarray:
        return rng.normal(0.0, WEIGHT_STD, size=(rows, columns)).astype(np.float32)

    def norm() -> np.ndarray:
        return np.ones(shape.width, dtype=np.float32)

    kv_width = shape.kv_heads * shape.head_width
    tensors = [("token_embd.weight", matrix(vocabulary, shape.width))]
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        tensors += [
            (f"{block}.attn_norm.weight", norm()),
            (f"{block}.attn_q.weight", matrix(shape.width, shape.width)),
            (f"{block}.attn_k.weight", matrix(kv_width, shape.width)),
            (f"{block}.attn_v.weight", matrix(kv_width, shape.width)),
            (f"{block}.attn_output.weight", matrix(shape.width, shape.width)),
            (f"{block}.ffn_norm.weight", norm()),
            (f"{block}.ffn_gate.weight", matrix(shape.feed_forward, shape.width)),
            (f"{block}.ffn_up.weight", matrix(shape.feed_forward, shape.width)),
            (f"{block}.ffn_down.weight", matrix(shape.width, shape.feed_forward)),
        ]
    tensors += [("output_norm.weight", norm()), ("output.weight", matrix(vocabulary, shape.width))]
    return tensors


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
