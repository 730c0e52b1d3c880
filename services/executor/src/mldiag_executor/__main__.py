"""`python -m mldiag_executor`: run replicas until SIGTERM (they outlive it)."""

from mldiag_executor.app import SERVICE, create_app
from mldiag_executor.settings import ExecutorSettings
from mldiag_platform.http import serve
from mldiag_platform.logging import configure_logging


def main() -> None:
    """Read settings from the environment, configure logging, serve."""
    settings = ExecutorSettings()
    configure_logging(SERVICE, settings.log)
    serve(create_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
