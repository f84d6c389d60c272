"""Load a server config and its policy files into one validated :class:`Settings`.

Every problem is reported as `file: key.path: what is wrong`, all of them at once, so
`gateway check` can print the full list.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gateway.settings.evaluation import evaluation_problems
from gateway.settings.interpolate import MissingVariable, interpolate
from gateway.settings.policy import Policy, PolicyFile
from gateway.settings.routes import RuleSettings, rule_reference_problems
from gateway.settings.server import ServerConfig

M = TypeVar("M", bound=BaseModel)


class SettingsError(Exception):
    """One or more problems in the config files; `problems` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    config: ServerConfig
    policy: Policy
    config_path: Path
    policy_paths: tuple[Path, ...] = field(default_factory=tuple)


def load_settings(path: str | Path, env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    config_path = Path(path)
    problems: list[str] = []
    config = _load_model(config_path, ServerConfig, env, problems)
    # a broken config does not hide its policies' problems: one run reports them all
    listed = config.policies if config is not None else _listed_policies(config_path)
    # Absolute but not resolved: a symlinked file (a Kubernetes ConfigMap volume's
    # `<key> -> ..data/<key>`) must be read through its link on every reload, not pinned
    # to the directory the link pointed at when the gateway started.
    policy_paths = tuple(_absolute(config_path.parent / p) for p in listed)
    policy = load_policy(policy_paths, env, problems)
    if policy is not None and config is not None:
        problems.extend(cross_check(config, policy, config_path, policy_paths))
    if problems or policy is None or config is None:
        raise SettingsError(problems)
    return Settings(config, policy, _absolute(config_path), policy_paths)


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))


def load_policy(
    paths: tuple[Path, ...], env: Mapping[str, str], problems: list[str]
) -> Policy | None:
    merged: dict[str, dict[str, Any]] = {
        "models": {},
        "routes": {},
        "tenants": {},
        "feedback_metrics": {},
    }
    origin: dict[tuple[str, str], Path] = {}
    rules: list[RuleSettings] = []
    before = len(problems)
    for path in paths:
        part = _load_model(path, PolicyFile, env, problems)
        if part is None:
            continue
        rules.extend(part.rules)
        for section in merged:
            for name, value in getattr(part, section).items():
                if (section, name) in origin:
                    problems.append(
                        f"{path}: {section}.{name}: already defined in {origin[section, name]}"
                    )
                    continue
                origin[section, name] = path
                merged[section][name] = value
    if len(problems) > before:
        return None
    return Policy(**merged, rules=rules)


def cross_check(
    config: ServerConfig, policy: Policy, config_path: Path, policy_paths: tuple[Path, ...]
) -> list[str]:
    """References between files: providers, models, routes, aliases, key ids."""
    where = ", ".join(str(p) for p in policy_paths) or str(config_path)
    problems: list[str] = []
    names: dict[str, str] = {}
    for model_name, model in policy.models.items():
        for i, deployment in enumerate(model.deployments):
            if deployment.provider not in config.providers:
                known = ", ".join(sorted(config.providers)) or "none"
                problems.append(
                    f"{where}: models.{model_name}.deployments[{i}].provider: unknown provider "
                    f"'{deployment.provider}' (providers in {config_path}: {known})"
                )
        for name in [model_name, *model.aliases]:
            if name in names:
                problems.append(
                    f"{where}: models.{model_name}: name '{name}' is already used by {names[name]}"
                )
            names[name] = f"model {model_name}"
    for route_name, route in policy.routes.items():
        if route_name in names:
            problems.append(
                f"{where}: routes.{route_name}: name is already used by {names[route_name]}"
            )
        names[route_name] = f"route {route_name}"
        for i, model_name in enumerate([*route.models, *route.fallbacks]):
            if model_name not in policy.models and not _is_alias(policy, model_name):
                problems.append(
                    f"{where}: routes.{route_name}.models[{i}]: unknown model '{model_name}'"
                )
        reference = route.reference
        reference_known = (
            reference is None or reference in policy.models or _is_alias(policy, reference)
        )
        if not reference_known:
            problems.append(
                f"{where}: routes.{route_name}.reference: unknown model '{reference}' "
                "(a catalog model the route's quality is judged against)"
            )
        kinds = {
            policy.models[m].kind for m in [*route.models, *route.fallbacks] if m in policy.models
        }
        if len(kinds) > 1:
            problems.append(
                f"{where}: routes.{route_name}: mixes chat and embedding models; a route "
                "serves one kind (chat, or /v1/embeddings)"
            )
        if route.weights is not None and len(route.weights) != len(route.models):
            problems.append(
                f"{where}: routes.{route_name}.weights: expected {len(route.models)} weights, "
                f"one per model, got {len(route.weights)}"
            )
    problems.extend(
        rule_reference_problems(
            policy.rules,
            model_names={n for m, model in policy.models.items() for n in [m, *model.aliases]},
            route_names=set(policy.routes),
            provider_names=set(config.providers),
            tenant_names=set(policy.tenants),
            key_ids={k.id for t in policy.tenants.values() for k in t.keys},
            where=where,
        )
    )
    problems.extend(_downgrade_problems(policy, set(names), where))
    problems.extend(
        evaluation_problems(
            [(f"routes.{n}", r.evaluation) for n, r in policy.routes.items()]
            + [(f"tenants.{n}", t.evaluation) for n, t in policy.tenants.items()],
            chat_models={
                name
                for name, canonical in policy.model_names.items()
                if policy.models[canonical].kind != "embedding"
            },
            tenants=set(policy.tenants),
            where=where,
        )
    )
    key_ids: dict[str, str] = {}
    key_hashes: dict[str, str] = {}
    for tenant_name, tenant in policy.tenants.items():
        for i, key in enumerate(tenant.keys):
            path = f"tenants.{tenant_name}.keys[{i}]"
            if key.id in key_ids:
                problems.append(f"{where}: {path}.id: '{key.id}' is also used by {key_ids[key.id]}")
            if key.hash in key_hashes:
                problems.append(f"{where}: {path}.hash: the same key is {key_hashes[key.hash]}")
            key_ids[key.id] = path
            key_hashes[key.hash] = path
    return problems


def _downgrade_problems(policy: Policy, routable: set[str], where: str) -> list[str]:
    """Budget downgrades must name a route (or model) that exists."""
    problems: list[str] = []
    for tenant_name, tenant in policy.tenants.items():
        budgets = [(f"tenants.{tenant_name}.budgets[{i}]", b) for i, b in enumerate(tenant.budgets)]
        for k, key in enumerate(tenant.keys):
            budgets += [
                (f"tenants.{tenant_name}.keys[{k}].budgets[{i}]", b)
                for i, b in enumerate(key.budgets)
            ]
        for path, budget in budgets:
            target = budget.downgrade_route
            if budget.downgrade_fraction is not None and target is None:
                problems.append(f"{where}: {path}.downgrade_route: needed with downgrade_fraction")
            if target is not None and target not in routable:
                problems.append(f"{where}: {path}.downgrade_route: unknown route '{target}'")
    return problems


def _is_alias(policy: Policy, name: str) -> bool:
    return any(name in m.aliases for m in policy.models.values())


def _load_model(
    path: Path, model: type[M], env: Mapping[str, str], problems: list[str]
) -> M | None:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path}: file not found")
        return None
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror}")
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        problems.append(f"{path}: invalid YAML{at}: {problem}")
        return None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
        return None
    missing: list[MissingVariable] = []
    resolved = interpolate(raw, env, missing=missing)
    for variable in missing:
        problems.append(
            f"{path}: {variable.path}: environment variable {variable.name} is not set "
            f"(set it, or write ${{{variable.name}:-default}})"
        )
    try:
        validated = model.model_validate(resolved)
    except ValidationError as exc:
        for error in exc.errors():
            problems.append(f"{path}: {_location(error['loc'])}: {_explain(error)}")
        return None
    return None if missing else validated


def _listed_policies(config_path: Path) -> list[str]:
    """The `policies:` list of a config that did not validate, read as leniently as it
    can be (nothing if the file itself cannot be read: that was reported already)."""
    try:
        raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    listed = raw.get("policies") if isinstance(raw, dict) else None
    if not isinstance(listed, list):
        return []
    return [item for item in listed if isinstance(item, str)]


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or "[" in str(part):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


# keys whose values are secrets or may be one pasted by mistake: never echoed
_SECRET_FIELDS = frozenset({"hash", "admin_key_hash", "api_key", "redis_url"})


def _explain(error: Any) -> str:
    kind = error["type"]
    loc = error.get("loc") or ()
    if loc and str(loc[-1]) in _SECRET_FIELDS and isinstance(error.get("input"), str):
        return _explain_secret(error)
    if kind == "extra_forbidden":
        return "unknown key (check the spelling; unknown keys are rejected)"
    if kind == "missing":
        return "required key is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    if "input" in error and not isinstance(error["input"], dict | list):
        return f"{message} (got {error['input']!r})"
    return message


def _explain_secret(error: Any) -> str:
    """The message without the value: it may be a key pasted where its hash belongs, and
    check output ends up in CI logs."""
    message = str(error["msg"]).removeprefix("Value error, ")
    value: str = error["input"]
    hint = ""
    if str(error["loc"][-1]).endswith("hash") and not value.startswith("sha256:"):
        hint = "; it looks like a key itself: store its hash (`gateway keys hash`), never the key"
    return f"{message} (value hidden, {len(value)} characters{hint})"
