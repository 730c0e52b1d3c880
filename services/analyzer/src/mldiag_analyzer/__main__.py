"""`python -m mldiag_analyzer`: serve until SIGTERM."""

from mldiag_analyzer.app import SERVICE, create_app
from mldiag_analyzer.settings import AnalyzerSettings
from mldiag_platform.http import serve
from mldiag_platform.logging import configure_logging


def main() -> None:
    """Read settings from the environment, configure logging, serve."""
    settings = AnalyzerSettings()
    configure_logging(SERVICE, settings.log)
    serve(create_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
