"""The Redis key layout of limits, and the hash tags that make it work on Redis Cluster.

A Lua script may only touch keys of one cluster slot, and a slot is chosen by the key's
hash tag (the text between the first `{` and the next `}`). A request touches two kinds
of state:

- its tenant's: the key, tenant and tenant+model buckets, the key and tenant leases, the
  key and tenant budgets. All of them share the tag `{t:<tenant>}`, so one script call
  checks and takes them atomically.
- its deployment's: the buckets and lease that keep a provider account under its own
  RPM/TPM. These are shared by every tenant, so they cannot live under a tenant's tag;
  they share the tag `{d:<deployment>}`.

On a single Redis both groups go to one script call. On a cluster they are two calls; the
second one's refusal rolls the first back (refunds the buckets, frees the leases,
unreserves the budgets), which can only make a concurrent request wait, never admit
more than the limit. One tag for everything would keep a single call but put every
tenant on one shard, which is what a cluster is meant to avoid.

    gw:{t:acme}:rl:key:k1:req          bucket, requests of key k1
    gw:{t:acme}:rl:tenant:tok          bucket, tokens of tenant acme
    gw:{t:acme}:rl:model:gpt-4.1:req   bucket, requests of acme on model gpt-4.1
    gw:{t:acme}:lease:key:k1           sorted set of in-flight request ids
    gw:{t:acme}:budget:tenant:month:2026-11
    gw:{t:acme}:budget:key:k1:rolling:3600
    gw:{t:acme}:settled:<request id>   marks a settled request (idempotent settlement)
    gw:{d:openai-main}:rl:tok          bucket, tokens of a deployment
    gw:{d:openai-main}:lease           in-flight requests of a deployment
"""

from __future__ import annotations

from gateway.limits.spec import BucketKind
from gateway.redis_names import clean_name as _clean
from gateway.redis_names import scope_path as scope_path

_KIND_SUFFIX: dict[BucketKind, str] = {"requests": "req", "tokens": "tok"}


def tenant_prefix(prefix: str, tenant_id: str) -> str:
    return f"{_clean(prefix)}:{{t:{_clean(tenant_id)}}}"


def deployment_prefix(prefix: str, deployment_id: str) -> str:
    return f"{_clean(prefix)}:{{d:{_clean(deployment_id)}}}"


def bucket_key(owner_prefix: str, scope_path: str, kind: BucketKind) -> str:
    path = f":{scope_path}" if scope_path else ""
    return f"{owner_prefix}:rl{path}:{_KIND_SUFFIX[kind]}"


def lease_key(owner_prefix: str, scope_path: str) -> str:
    path = f":{scope_path}" if scope_path else ""
    return f"{owner_prefix}:lease{path}"


def budget_key(owner_prefix: str, scope_path: str, period_label: str) -> str:
    return f"{owner_prefix}:budget:{scope_path}:{period_label}"


def settled_marker_key(tag_key: str, request_id: str) -> str:
    """A key in the same cluster slot as `tag_key` that marks `request_id` as settled."""
    start = tag_key.find("{")
    end = tag_key.find("}", start + 1) if start >= 0 else -1
    owner = tag_key[: end + 1] if end > start + 1 else tag_key
    return f"{owner}:settled:{_clean(request_id)}"


def hash_tag(key: str) -> str:
    """The part of `key` Redis Cluster hashes: Redis's own rule."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key
