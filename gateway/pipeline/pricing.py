"""What a served request cost: the metering room's prices, with one GPU-hour amortizer
per self-hosted deployment (it learns that deployment's throughput as it serves)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.metering.cost import GpuHourAmortizer, cost_of, served_tokens
from gateway.pipeline.flow import Flow
from gateway.settings.server import ProviderSettings
from gateway.tokens import count_prompt, count_text
from gateway.usage import Usage


class Pricer:
    def __init__(self, providers: Mapping[str, ProviderSettings]) -> None:
        self._amortizers: dict[str, GpuHourAmortizer | None] = {}
        # a GPU pool's class sets the throughput its GPU-hour is spread over until its
        # own traffic is known (an H100 serves several times what a V100 does)
        self._gpu_classes = {
            name: p.replicas.gpu_class for name, p in providers.items() if p.replicas is not None
        }

    def price(self, flow: Flow) -> None:
        """Set `flow.cost`; when the provider reported no usage (an abandoned stream, an
        upstream that omits it), or none yet for text it streamed (an Anthropic stream
        abandoned before its final count), count it ourselves and mark it estimated."""
        candidate = flow.served_by
        if candidate is None or flow.request is None:
            return
        tokenizer = candidate.settings.tokenizer
        usage = flow.usage
        if usage is None or (usage.input_tokens == 0 and usage.output_tokens == 0):
            usage = Usage(
                input_tokens=flow.prompt_tokens_estimate or count_prompt(flow.request, tokenizer),
                output_tokens=streamed_output_estimate(flow, tokenizer),
                estimated=True,
            )
            flow.usage = usage
        elif flow.unreported_text:
            streamed = count_text(flow.unreported_text, tokenizer)
            if streamed > usage.output_tokens:
                usage = msgspec.structs.replace(usage, output_tokens=streamed, estimated=True)
                flow.usage = usage
        prices = candidate.settings.prices_on(candidate.deployment)
        amortizer = None
        if prices.gpu_hour is not None:
            key = candidate.deployment_id
            if key not in self._amortizers:
                gpu_class = self._gpu_classes.get(candidate.deployment.provider)
                self._amortizers[key] = GpuHourAmortizer.for_prices(prices, gpu_class)
            amortizer = self._amortizers[key]
            if amortizer is not None:
                amortizer.observe(served_tokens(usage))
        flow.cost = cost_of(usage, prices, amortizer)
        flow.headers["x-gateway-cost-usd"] = format(flow.cost.normalize(), "f")


def streamed_output_estimate(flow: Flow, tokenizer: str) -> int:
    """The output tokens of a stream whose usage never came: its streamed text counted
    offline where the translation kept it, else one token per content chunk (as
    OpenAI-compatible servers stream), else one per chunk sent."""
    if flow.unreported_text is not None:
        return count_text(flow.unreported_text, tokenizer)
    return flow.content_chunks if flow.content_chunks is not None else flow.streamed_chunks
