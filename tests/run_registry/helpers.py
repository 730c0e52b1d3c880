"""Names the registry's tests share (importable, unlike conftest)."""

from collections.abc import Callable

from mldiag_run_registry.settings import RunRegistrySettings

RegistrySettings = Callable[..., RunRegistrySettings]
"""Settings of a registry on this test's namespace and schema, with the given overrides
(the ``registry_settings_with`` fixture)."""
