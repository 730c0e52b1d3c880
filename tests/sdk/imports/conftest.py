"""The served platform of the CLI's connected tests, for the import tests too."""

from sdk.cli.conftest import _no_ambient_credentials, platform_apps

__all__ = ["_no_ambient_credentials", "platform_apps"]
