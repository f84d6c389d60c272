"""The upstream network failures every HTTP client under the transport seam reports, in
our error tree; messages name the provider, never its URL or key."""

from __future__ import annotations

from gateway.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable, UpstreamUnreachable


def timed_out(phase: str, provider: str) -> UpstreamError:
    return UpstreamTimeout(f"timed out {phase} provider '{provider}'", provider=provider)


def refused(provider: str) -> UpstreamError:
    return UpstreamUnreachable(
        f"could not connect to provider '{provider}' (connection refused or unreachable)",
        provider=provider,
    )


def closed(provider: str) -> UpstreamError:
    return UpstreamUnavailable(
        f"provider '{provider}' closed the connection unexpectedly", provider=provider
    )
