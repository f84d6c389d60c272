"""Settings: the YAML files as pydantic models, loaded once and passed down."""

from gateway.settings.loader import Settings, SettingsError, load_settings

__all__ = ["Settings", "SettingsError", "load_settings"]
