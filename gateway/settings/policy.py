"""A policy file (`policies/*.yaml`): models, routes, tenants. Several files merge into one
:class:`Policy`; a name defined twice is an error."""

from __future__ import annotations

from pydantic import Field

from gateway.settings.base import Strict
from gateway.settings.catalog import ModelSettings
from gateway.settings.routes import RouteSettings, RuleSettings
from gateway.settings.tenants import TenantSettings


class PolicyFile(Strict):
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    # evaluated in order for every request; files' lists are concatenated in file order
    rules: list[RuleSettings] = Field(default_factory=list)


class Policy(Strict):
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    # evaluated in order for every request; files' lists are concatenated in file order
    rules: list[RuleSettings] = Field(default_factory=list)
