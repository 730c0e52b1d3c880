"""`python -m mldiag_platform.edge`: serve the one base URL until SIGTERM."""

import importlib.util
import sys

import uvicorn

from mldiag_platform.edge.app import SERVICE, create_app
from mldiag_platform.edge.settings import EdgeSettings
from mldiag_platform.logging import configure_logging

GRACEFUL_SHUTDOWN_SECONDS = 5
"""Open streams (live pages, followed logs) get this long before they are cut."""


def _no_sniffio_lookups() -> None:
    """httpcore asks ``import sniffio`` which async library runs on every pool operation (two
    per request). Without sniffio installed (anyio 4 no longer needs it) each failed import
    scans sys.path again: 0.3 ms apiece, most of what the edge added to a request. A None in
    sys.modules makes the import fail at once, and httpcore then assumes asyncio, which it is.
    """
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]  # import's documented "absent"


def main() -> None:
    """Read settings from the environment, configure logging, serve."""
    _no_sniffio_lookups()
    settings = EdgeSettings()
    configure_logging(SERVICE, settings.log)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,  # our structlog handler is already on the root logger
        access_log=False,
        lifespan="on",
        # The services' own Server and Date headers pass through unchanged.
        server_header=False,
        date_header=False,
        # The edge is the front door: what callers claim in X-Forwarded-* is not trusted here
        # (it is passed on, and the edge appends the address it saw).
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        timeout_keep_alive=75,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
