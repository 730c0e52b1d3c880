"""`python -m mldiag_xprof_provisioner`: serve until SIGTERM, then stop every XProf."""

from mldiag_platform.http import serve
from mldiag_platform.logging import configure_logging
from mldiag_xprof_provisioner.app import SERVICE, create_app
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings


def main() -> None:
    """Read settings from the environment, configure logging, serve."""
    settings = XProfProvisionerSettings()
    configure_logging(SERVICE, settings.log)
    serve(create_app(settings), settings.host, settings.port)


if __name__ == "__main__":
    main()
