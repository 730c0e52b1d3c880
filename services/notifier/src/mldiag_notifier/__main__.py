"""`python -m mldiag_notifier`: serve until SIGTERM."""

from mldiag_notifier.app import SERVICE, create_app
from mldiag_notifier.settings import NotifierSettings
from mldiag_platform.http import serve
from mldiag_platform.logging import configure_logging


def main() -> None:
    """Read settings from the environment, configure logging, serve."""
    settings = NotifierSettings()
    configure_logging(SERVICE, settings.log)
    serve(create_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
