"""A policy file (`policies/*.yaml`): models, routes, tenants. Several files merge into one
:class:`Policy`; a name defined twice is an error."""

from __future__ import annotations

from pydantic import Field

from gateway.settings.base import Strict
from gateway.settings.catalog import ModelSettings
from gateway.settings.routes import RouteSettings
from gateway.settings.tenants import TenantSettings


class PolicyFile(Strict):
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)


class Policy(Strict):
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
