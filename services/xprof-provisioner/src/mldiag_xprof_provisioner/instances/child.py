"""The entry point of every XProf child: it dies with the provisioner, then serves XProf on
loopback only, to callers that present the instance's secret.

``python -P -m mldiag_xprof_provisioner.instances.child --logdir D --port P`` is ``xprof server``
with four differences:

- HTTP listens on 127.0.0.1, not on every interface: ``xprof server`` has no bind-address
  flag, so this assembles the server from the same parts (``xprof.server``'s context, plugin
  loader and ``run_server``, which does take a host) and only the provisioner's proxy, on the
  same machine, can reach it;
- no gRPC worker service: XProf's C++ worker listens on 0.0.0.0 with no way to choose the
  address and no authentication, and one instance processes its sessions itself without it
  (multi-host trace viewer and overview included); it only matters for spreading one
  session's hosts over several XProfs (``--worker_service_address``), which we don't do;
- every request must carry the instance's secret in ``SECRET_HEADER``, else 403: XProf has
  no authentication and answers ``session_path=``, ``run_path=`` and ``capture_profile`` to
  anyone, and loopback is open to every local process. The provisioner makes one secret per
  instance and writes it on the child's stdin (never on the command line or in the
  environment, which ``ps`` and ``/proc`` show); only the proxy and the readiness probe send it;
- it dies with the provisioner. The provisioner stops its instances on every orderly
  shutdown; this covers a provisioner killed with SIGKILL or crashing, which would otherwise
  leave XProf processes holding ports and memory.
"""

import argparse
import hmac
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from mldiag_xprof_provisioner.orphans import die_with_parent

LOOPBACK = "127.0.0.1"
SECRET_HEADER = "x-mldiag-instance-secret"  # noqa: S105  # the header's name, not a secret
"""Carries the instance's secret from the proxy to XProf."""
_SECRET_ENVIRON = "HTTP_" + SECRET_HEADER.upper().replace("-", "_")
_MIN_SECRET_LENGTH = 32

# A WSGI app, loosely typed: XProf's own are untyped.
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="xprof_child")
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default=LOOPBACK)
    return parser.parse_args(argv)


def guarded(app: WsgiApp, secret: str) -> WsgiApp:
    """``app``, answering only requests that carry ``secret`` in ``SECRET_HEADER``."""
    expected = secret.encode()

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        presented = str(environ.get(_SECRET_ENVIRON, "")).encode("latin-1", "replace")
        # Constant time: the answer's timing must not tell how much of a guess was right.
        if not hmac.compare_digest(presented, expected):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"reach XProf through the mldiag proxy\n"]
        return app(environ, start_response)

    return application


def serve(logdir: str, host: str, port: int, secret: str) -> None:
    """XProf's ``_launch_server`` without the gRPC worker, on ``host``, behind the secret;
    blocks."""
    from cheroot import wsgi  # noqa: PLC0415  # XProf's own server, loaded with it
    from xprof import server  # type: ignore[import-untyped]  # noqa: PLC0415  # heavy, untyped

    context = server.TBContext(logdir, server.DataProvider(logdir), server.TBContext.Flags(False))
    # The proxy refuses capture_profile anyway; hiding the button keeps the UI honest.
    context.hide_capture_profile_button = True
    context.enable_tab_name_label = False
    context.src_prefix = None
    plugin = server.ProfilePluginLoader().load(context)
    # server.run_server, with the guard in front of XProf's app.
    wsgi.Server((host, port), guarded(server.make_wsgi_app(plugin), secret)).start()


def main(argv: list[str] | None = None) -> int:
    """Arrange to die with the parent, read the secret, then run XProf's server until
    signalled."""
    die_with_parent()
    args = _arguments(sys.argv[1:] if argv is None else argv)
    secret = sys.stdin.readline().strip()
    if len(secret) < _MIN_SECRET_LENGTH:
        sys.stderr.write("no instance secret on stdin: XProf is never served without one\n")
        return 2
    if not os.path.isdir(args.logdir):
        sys.stderr.write(f"log directory {args.logdir!r} does not exist\n")
        return 2
    serve(os.path.abspath(args.logdir), args.host, args.port, secret)
    return 0


if __name__ == "__main__":
    sys.exit(main())
