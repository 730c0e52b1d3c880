"""``mldiag substrate generate``: the substrate's credentials for compose or Kubernetes.

The secrets are made on the first run and kept in ``--out`` (owner-only), so running it
again renders the same passwords: rerun it after an upgrade that adds a user or a
permission, and restart NATS to load the new authorization block.
"""

import argparse
import os
import sys
from pathlib import Path

from mldiag.local.errors import LocalStackError
from mldiag.local.secrets import kept_secrets

DEFAULT_OUT = ".mldiag/substrate"
"""Where compose looks for the files unless ``MLDIAG_SUBSTRATE_DIR`` says otherwise."""


def add_substrate_command(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``substrate generate`` to ``mldiag``'s subcommands."""
    substrate = commands.add_parser(
        "substrate",
        help="credentials of NATS and PostgreSQL for compose or Kubernetes",
        description="The substrate is locked down: a NATS user with its own permissions "
        "and a PostgreSQL role owning its own schema for every service. `mldiag up` does "
        "this by itself; these commands write the same for other deployments.",
    )
    verbs = substrate.add_subparsers(dest="verb", required=True, metavar="VERB")
    generate = verbs.add_parser(
        "generate",
        help="write (or print) the configuration and credentials",
        description="Make the secrets on the first run (kept in --out, owner-only) and "
        "write, for compose: nats-auth.conf (the NATS authorization block), one env file "
        "per service, postgres.env, postgres-roles.env, postgres-roles.sql and nats-cli.env; "
        "for Kubernetes (--format k8s): print the Secrets mldiag-nats-auth and "
        "mldiag-credentials as YAML.",
    )
    generate.add_argument(
        "--out",
        default=os.environ.get("MLDIAG_SUBSTRATE_DIR", DEFAULT_OUT),
        help=f"directory for the secrets and files [$MLDIAG_SUBSTRATE_DIR or {DEFAULT_OUT}]",
    )
    generate.add_argument(
        "--format", choices=("compose", "k8s"), default="compose", help="[compose]"
    )
    generate.add_argument(
        "--namespace",
        default=os.environ.get("MLDIAG_NATS_NAMESPACE", "mldiag"),
        help="the installation's NATS namespace [$MLDIAG_NATS_NAMESPACE or mldiag]",
    )
    generate.add_argument(
        "--postgres-host",
        help="PostgreSQL host in the services' DSNs [compose: postgres; k8s: mldiag-postgres-rw]",
    )
    generate.add_argument(
        "--postgres-port", type=int, default=5432, help="PostgreSQL port in the DSNs [5432]"
    )
    generate.set_defaults(handler=_generate)


def _generate(args: argparse.Namespace) -> int:
    try:
        # Imported here: only this command needs the platform next to the SDK.
        from mldiag_platform import substrate  # noqa: PLC0415
        from mldiag_schemas.bus import Namespace  # noqa: PLC0415
    except ImportError as error:
        raise LocalStackError(f"the platform is not installed ({error})") from None
    out = Path(args.out)
    secrets = kept_secrets(out, substrate.SECRET_NAMES)
    namespace = Namespace(args.namespace)
    if args.format == "k8s":
        host = args.postgres_host or "mldiag-postgres-rw"
        sys.stdout.write(substrate.kubernetes_secrets(namespace, secrets, host, args.postgres_port))
        return 0
    files = substrate.compose_files(namespace, secrets, args.postgres_host or "postgres")
    for name, text in files.items():
        _write_private(out / name, text)
    print(f"wrote {', '.join(sorted(files))} to {out}")
    return 0


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text)
