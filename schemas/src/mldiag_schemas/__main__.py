"""`python -m mldiag_schemas [DIR]`: regenerate the committed contract documents."""

import sys
from pathlib import Path

from mldiag_schemas.documents import write


def main() -> None:
    """Write the documents into DIR (default: ``schemas/contracts`` beside this package)."""
    default = Path(__file__).resolve().parents[2] / "contracts"
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    for path in write(target):
        sys.stdout.write(f"{path}\n")


if __name__ == "__main__":
    main()
