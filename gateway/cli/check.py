"""`gateway check --config PATH`: validate every file and print a summary or the errors."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gateway.settings import SettingsError, load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("check", help="validate a config and its policy files")
    parser.add_argument("--config", required=True, help="server config YAML")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
