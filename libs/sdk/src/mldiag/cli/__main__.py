"""``python -m mldiag.cli``: the same as the ``mldiag`` command."""

import sys

from mldiag.cli import main

sys.exit(main())
