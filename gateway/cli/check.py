"""`gateway check --config PATH`: validate every file and print a summary or the errors.

Every problem of every stage (environment variables, the config's schema, the policies'
schemas, references between them) is reported in one run. Warnings (a provider key
written into the YAML instead of `${VAR}`) are printed but do not fail the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from gateway.settings import SettingsError, load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("check", help="validate a config and its policy files")
    parser.add_argument("--config", required=True, help="server config YAML")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for warning in literal_secret_warnings(Path(args.config)):
        print(f"warning: {warning}", file=sys.stderr)
    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        print(f"{len(exc.problems)} problem(s) found:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    config, policy = settings.config, settings.policy
    inert = [
        f"{settings.config_path}: providers.{name}.{problem}"
        for name, provider in config.providers.items()
        for problem in provider.inert_settings(config.store.kind)
    ]
    if inert:
        print(f"{len(inert)} setting(s) that do nothing (remove or fix them):", file=sys.stderr)
        for problem in inert:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"config OK: {settings.config_path}")
    print(f"  store: {config.store.kind}")
    print(f"  providers ({len(config.providers)}):")
    for name, provider in config.providers.items():
        where = (
            f"{len(provider.replicas.urls)} replicas" if provider.replicas else provider.base_url
        )
        key = "key set" if provider.api_key is not None else "no key"
        print(f"    {name}: {provider.kind}, {where}, {key}")
    print(f"  models ({len(policy.models)}):")
    for name, model in policy.models.items():
        aliases = f" (aliases: {', '.join(model.aliases)})" if model.aliases else ""
        deployments = ", ".join(f"{d.provider}:{d.upstream_model}" for d in model.deployments)
        print(f"    {name}{aliases} -> {deployments}")
    print(f"  routes ({len(policy.routes)}):")
    for name, route in policy.routes.items():
        print(f"    {name}: {route.strategy} over {', '.join(route.models)}")
    print(f"  tenants ({len(policy.tenants)}):")
    for name, tenant in policy.tenants.items():
        print(f"    {name}: {len(tenant.keys)} key(s)")
    return 0


def literal_secret_warnings(config_path: Path) -> list[str]:
    """Provider keys and Redis passwords written into the YAML itself: they belong in
    the environment (`${VAR}`), not in a file that gets committed. Never quotes them."""
    try:
        raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []  # load_settings reports it
    if not isinstance(raw, dict):
        return []
    warnings: list[str] = []
    providers = raw.get("providers")
    for name, provider in providers.items() if isinstance(providers, dict) else []:
        key = provider.get("api_key") if isinstance(provider, dict) else None
        if isinstance(key, str) and key and "${" not in key:
            warnings.append(
                f"{config_path}: providers.{name}.api_key: the key is written in the file; "
                "provider keys belong in the environment: "
                f"api_key: ${{{str(name).upper()}_API_KEY}}"
            )
    store = raw.get("store")
    url = store.get("redis_url") if isinstance(store, dict) else None
    if isinstance(url, str) and "${" not in url and "@" in url.partition("://")[2]:
        warnings.append(
            f"{config_path}: store.redis_url: a password is written in the file; "
            "use redis_url: ${GATEWAY_REDIS_URL}"
        )
    return warnings
