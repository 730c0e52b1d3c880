"""`python -m mldiag_training`: serve until SIGTERM."""

from mldiag_platform.http import serve
from mldiag_platform.logging import configure_logging
from mldiag_training.app import SERVICE, create_app
from mldiag_training.settings import TrainingSettings


def main() -> None:
    """Read settings from the environment, configure logging, serve."""
    settings = TrainingSettings()
    configure_logging(SERVICE, settings.log)
    serve(create_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
