"""The one rule for the `model` field of every answer the gateway sends, whatever API
the client spoke and whichever upstream served it: the served model, as the upstream
named it in its answer (a dated snapshot such as `claude-sonnet-4-5-20250929`), or,
where the upstream's answer names none, the deployment's upstream model id. The name
the client asked for (a route, an alias) is in the `x-gateway-route` header."""

from __future__ import annotations


def served_model(reported: object, deployment_model: str) -> str:
    """The `model` of an answer: what the upstream `reported`, else `deployment_model`."""
    return reported if isinstance(reported, str) and reported else deployment_model
