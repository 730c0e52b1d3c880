"""`python -m mldiag_run_registry`: serve until SIGTERM."""

from mldiag_platform.http import serve
from mldiag_platform.logging import configure_logging
from mldiag_run_registry.app import SERVICE, create_app
from mldiag_run_registry.settings import RunRegistrySettings


def main() -> None:
    """Read settings from the environment, configure logging, serve."""
    settings = RunRegistrySettings()
    configure_logging(SERVICE, settings.log)
    serve(create_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
