"""How many concurrent requests the gateway lets one replica hold, by GPU class.

A continuous-batching server takes every request it is sent; past the batch its KV cache
can hold, extra requests only queue inside the server (or preempt running ones), where
the gateway can no longer place them on a less busy replica. So the gateway holds the
rest back. The defaults sit in the middle of the range that keeps each class busy on a
7-13B model with chat-sized prompts (V100 8-12, A100 16-24, H100 32-48); measure with
`bench/batching.py` and set `max_inflight_per_replica` for other models.
"""

from __future__ import annotations

from gateway.settings.server import GpuClass, ReplicaPoolSettings

DEFAULT_MAX_IN_FLIGHT: dict[GpuClass, int] = {"v100": 10, "a100": 20, "h100": 40}
# without a GPU class: an A100's worth, the middle of the table
FALLBACK_MAX_IN_FLIGHT = 20


def max_in_flight(settings: ReplicaPoolSettings) -> int:
    """The per-replica limit: the explicit setting, else the GPU class default."""
    if settings.max_inflight_per_replica is not None:
        return settings.max_inflight_per_replica
    if settings.gpu_class is not None:
        return DEFAULT_MAX_IN_FLIGHT[settings.gpu_class]
    return FALLBACK_MAX_IN_FLIGHT
