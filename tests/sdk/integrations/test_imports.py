"""Importing the SDK imports no framework, and each integration imports without its own."""

import subprocess
import sys

import pytest

FRAMEWORKS = ("keras", "flax", "optax", "torch", "lightning", "pytorch_lightning", "transformers")


def test_importing_mldiag_imports_no_framework() -> None:
    script = (
        "import sys, mldiag, mldiag.integrations\n"
        f"loaded = [name for name in {FRAMEWORKS!r} if name in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


@pytest.mark.parametrize("module", ["transformers", "lightning"])
def test_the_module_imports_without_its_framework(module: str) -> None:
    script = (
        f"import sys; sys.modules['{module}'] = None; sys.modules['pytorch_lightning'] = None\n"
        f"from mldiag.integrations.{module} import MldiagCallback\n"
        "assert MldiagCallback.__mro__[1] is object, MldiagCallback.__mro__\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
