"""GPU profiles: how long one scheduler step takes on an emulated GPU.

A step is one forward pass over the running batch: some prompt tokens being prefilled
(compute-bound) and one new token for every decoding sequence (memory-bound). The model
is a sum of four terms::

    step = overhead                                  launch + scheduling, per step
         + weights_read                              every forward pass streams the weights
         + prefill_tokens   * prefill_per_token      GEMM FLOPs, 2 * params per token
         + decode_seqs      * decode_per_seq         GEMM rows added by each decoding sequence
         + context_tokens   * decode_per_context     KV cache read by attention, per token held

All presets assume the same served model, Llama-3.1-8B-Instruct in bf16 (fp16 on V100)
on one GPU with CUDA graphs:

- weights: 8.0e9 params * 2 bytes = 16 GB read once per forward pass;
- FLOPs: 2 * 8.0e9 = 16 GFLOP per token through the dense layers;
- KV cache: 32 layers * 8 KV heads * 128 dims * 2 (K and V) * 2 bytes = 128 KiB per token;
- achieved fractions: 70% of peak HBM bandwidth, 50% of peak tensor FLOPs in prefill (40%
  on V100), decode GEMM rows at 60% of peak; attention's quadratic prefill term (about 6%
  of prefill FLOPs at 2k context) is left out.

Resulting speeds (single sequence / batch of 64 at 2k context / prefill), in tokens/s:
H100 125 / 3,800 / 31k; A100 78 / 2,100 / 9.8k; V100 36 / 940 / 3.1k. The H100 figures
are in line with published SGLang/vLLM numbers for 8B models. The KV capacity is what is
left of memory after weights and activations at SGLang's default `mem_fraction_static`
(about 0.88 on 80 GB cards).
"""

from __future__ import annotations

from dataclasses import dataclass

_WEIGHT_BYTES = 16e9
_FLOPS_PER_TOKEN = 16e9
_KV_BYTES_PER_TOKEN = 131_072
_BANDWIDTH_EFFICIENCY = 0.7
_DECODE_FLOPS_EFFICIENCY = 0.6


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """Cost constants of one GPU class; all times in seconds."""

    name: str
    overhead: float
    weights_read: float
    prefill_per_token: float
    decode_per_seq: float
    decode_per_context: float
    kv_cache_tokens: int
    max_running_requests: int
    chunked_prefill_size: int

    def step_seconds(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        """GPU time of one forward pass; zero when there is nothing to compute."""
        if prefill_tokens == 0 and decode_seqs == 0:
            return 0.0
        return (
            self.overhead
            + self.weights_read
            + prefill_tokens * self.prefill_per_token
            + decode_seqs * self.decode_per_seq
            + context_tokens * self.decode_per_context
        )


def _profile(
    name: str,
    *,
    bandwidth: float,
    tensor_flops: float,
    prefill_efficiency: float,
    overhead: float,
    kv_cache_tokens: int,
    max_running_requests: int,
    chunked_prefill_size: int,
) -> GpuProfile:
    effective_bandwidth = bandwidth * _BANDWIDTH_EFFICIENCY
    return GpuProfile(
        name=name,
        overhead=overhead,
        weights_read=_WEIGHT_BYTES / effective_bandwidth,
        prefill_per_token=_FLOPS_PER_TOKEN / (tensor_flops * prefill_efficiency),
        decode_per_seq=_FLOPS_PER_TOKEN / (tensor_flops * _DECODE_FLOPS_EFFICIENCY),
        decode_per_context=_KV_BYTES_PER_TOKEN / effective_bandwidth,
        kv_cache_tokens=kv_cache_tokens,
        max_running_requests=max_running_requests,
        chunked_prefill_size=chunked_prefill_size,
    )


H100 = _profile(
    # H100 SXM 80 GB: 3.35 TB/s HBM3, 989 TFLOPS dense bf16. 80 GB * 0.88 - 16 GB weights
    # - ~4 GB activations/graphs = ~50 GB of KV = ~400k tokens.
    "h100",
    bandwidth=3.35e12,
    tensor_flops=989e12,
    prefill_efficiency=0.5,
    overhead=0.001,
    kv_cache_tokens=400_000,
    max_running_requests=256,
    chunked_prefill_size=8192,
)

A100 = _profile(
    # A100 SXM 80 GB: 2.04 TB/s HBM2e, 312 TFLOPS dense bf16; same memory split as H100.
    "a100",
    bandwidth=2.04e12,
    tensor_flops=312e12,
    prefill_efficiency=0.5,
    overhead=0.0015,
    kv_cache_tokens=400_000,
    max_running_requests=192,
    chunked_prefill_size=4096,
)

V100 = _profile(
    # V100 SXM2 32 GB: 0.9 TB/s HBM2, 125 TFLOPS fp16 tensor cores (no bf16, older kernels,
    # hence the lower efficiency). 32 GB * 0.85 - 16 GB weights - ~2.5 GB = ~9 GB of KV.
    "v100",
    bandwidth=0.9e12,
    tensor_flops=125e12,
    prefill_efficiency=0.4,
    overhead=0.002,
    kv_cache_tokens=70_000,
    max_running_requests=64,
    chunked_prefill_size=2048,
)

PROFILES: dict[str, GpuProfile] = {p.name: p for p in (H100, A100, V100)}


def profile_named(name: str) -> GpuProfile:
    try:
        return PROFILES[name.lower()]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown GPU profile {name!r}; expected one of: {known}") from None
