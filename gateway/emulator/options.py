"""Everything an emulator instance is configured by, in one frozen value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.emulator.profiles import GpuProfile, profile_named
from gateway.emulator.scheduler import SchedulerConfig

MetricsStyle = Literal["sglang", "vllm"]


@dataclass(frozen=True, slots=True)
class EmulatorOptions:
    """Emulator settings. `None` scheduler limits take the GPU profile's defaults.

    time_scale: wall seconds per emulated GPU second (1 = real time, 0.01 = 100x faster);
        0 skips the scheduler entirely and answers at once (an "instant upstream").
    slow_start_ms: wall-clock delay before each chat completion is handled, not scaled.
    crash_after: the process exits (status 3) once this many chat completions were
        answered; connections still open are cut, as in a real crash.
    """

    model: str = "emulated-model"
    seed: int = 0
    profile: str = "h100"
    max_running_requests: int | None = None
    kv_cache_tokens: int | None = None
    chunked_prefill_size: int | None = None
    page_size: int = 16
    static_batching: bool = False
    time_scale: float = 1.0
    metrics_style: MetricsStyle = "sglang"
    tokenizer: str = "approx"
    min_output_tokens: int = 16
    max_output_tokens: int = 256
    fail_rate: float = 0.0
    fail_status: int = 503
    slow_start_ms: float = 0.0
    crash_after: int | None = None

    def __post_init__(self) -> None:
        if self.time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        if not 0.0 <= self.fail_rate <= 1.0:
            raise ValueError("fail_rate must be between 0 and 1")
        if not 400 <= self.fail_status <= 599:
            raise ValueError("fail_status must be an HTTP error status (400-599)")
        if self.crash_after is not None and self.crash_after < 1:
            raise ValueError("crash_after must be at least 1")
        profile_named(self.profile)

    @property
    def instant(self) -> bool:
        return self.time_scale == 0

    def gpu_profile(self) -> GpuProfile:
        return profile_named(self.profile)

    def scheduler_config(self) -> SchedulerConfig:
        profile = self.gpu_profile()
        return SchedulerConfig(
            max_running_requests=self.max_running_requests or profile.max_running_requests,
            kv_cache_tokens=self.kv_cache_tokens or profile.kv_cache_tokens,
            chunked_prefill_size=self.chunked_prefill_size or profile.chunked_prefill_size,
            page_size=self.page_size,
            static_batching=self.static_batching,
        )
