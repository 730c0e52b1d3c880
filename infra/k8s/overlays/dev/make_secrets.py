"""Writes secrets.dev.yaml: the Secrets `mldiag substrate generate --format k8s` prints, made
with fixed, public passwords, for development clusters only.

    .venv/bin/python infra/k8s/overlays/dev/make_secrets.py

tests/infra/test_k8s_manifests.py fails when the file differs from what this writes (after a
change to the users, their permissions or the roles SQL): run it again then.
"""

from pathlib import Path
from typing import Any

import yaml

from mldiag_platform import substrate
from mldiag_schemas.bus import Namespace

OUT = Path(__file__).with_name("secrets.dev.yaml")
ADMIN_TOKEN = "mldiag_dev-only-admin-token"  # noqa: S105  # public on purpose, dev only
HEADER = """\
# FOR DEVELOPMENT ONLY. Example credentials, public in this repository: never apply these to
# a cluster anyone else can reach. A real installation makes its own with
# `mldiag substrate generate --format k8s` (docs/kubernetes.md); the production overlay
# carries none. Written by make_secrets.py (the same generator, fixed passwords): do not edit.
"""


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (auth.conf, the roles SQL) as readable literal blocks."""


def _string(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def dev_secrets() -> str:
    """The text of secrets.dev.yaml."""
    passwords = {name: f"dev-only-{name}" for name in substrate.SECRET_NAMES}
    printed = substrate.kubernetes_secrets(Namespace("mldiag"), passwords, "mldiag-postgres-rw")
    documents = [doc for doc in yaml.safe_load_all(printed) if doc]
    for doc in documents:
        doc["metadata"]["labels"]["mldiag.io/dev-only"] = "true"
        if doc["metadata"]["name"] == substrate.CREDENTIALS_SECRET:
            # The registry's first admin token (optional; not made by the generator).
            doc["stringData"]["admin-token"] = ADMIN_TOKEN
    return HEADER + "".join(
        "---\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100) for doc in documents
    )


if __name__ == "__main__":
    OUT.write_text(dev_secrets())
