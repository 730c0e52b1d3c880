"""The entry point of every XProf child: it dies with the provisioner, then serves XProf on
loopback only.

``python -P -m mldiag_xprof_provisioner.instances.child --logdir D --port P`` is ``xprof server``
with three differences:

- HTTP listens on 127.0.0.1, not on every interface: ``xprof server`` has no bind-address
  flag, so this assembles the server from the same parts (``xprof.server``'s context, plugin
  loader and ``run_server``, which does take a host) and only the provisioner's proxy, on the
  same machine, can reach it;
- no gRPC worker service: XProf's C++ worker listens on 0.0.0.0 with no way to choose the
  address and no authentication, and one instance processes its sessions itself without it
  (multi-host trace viewer and overview included); it only matters for spreading one
  session's hosts over several XProfs (``--worker_service_address``), which we don't do;
- it dies with the provisioner. The provisioner stops its instances on every orderly
  shutdown; this covers a provisioner killed with SIGKILL or crashing, which would otherwise
  leave XProf processes holding ports and memory.
"""

import argparse
import os
import sys

from mldiag_xprof_provisioner.orphans import die_with_parent

LOOPBACK = "127.0.0.1"


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="xprof_child")
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default=LOOPBACK)
    return parser.parse_args(argv)


def serve(logdir: str, host: str, port: int) -> None:
    """XProf's ``_launch_server`` without the gRPC worker, on ``host``; blocks."""
    from xprof import server  # type: ignore[import-untyped]  # noqa: PLC0415  # heavy, untyped

    context = server.TBContext(logdir, server.DataProvider(logdir), server.TBContext.Flags(False))
    # The proxy refuses capture_profile anyway; hiding the button keeps the UI honest.
    context.hide_capture_profile_button = True
    context.enable_tab_name_label = False
    context.src_prefix = None
    plugin = server.ProfilePluginLoader().load(context)
    server.run_server(plugin, host, port)


def main(argv: list[str] | None = None) -> int:
    """Arrange to die with the parent, then run XProf's server until signalled."""
    die_with_parent()
    args = _arguments(sys.argv[1:] if argv is None else argv)
    if not os.path.isdir(args.logdir):
        sys.stderr.write(f"log directory {args.logdir!r} does not exist\n")
        return 2
    serve(os.path.abspath(args.logdir), args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
