"""Importing runs from other tools: TensorBoard log directories and MLflow tracking servers.

Readers (:mod:`mldiag.imports.tensorboard`, :mod:`mldiag.imports.mlflow`) turn a source
into :class:`~mldiag.imports.source.SourceRun` objects; :class:`~mldiag.imports.writer.Importer`
writes them to the platform so that importing again, after a crash or twice, sends nothing
twice. ``mldiag import`` (:mod:`mldiag.cli.imports`) is the command line; ``docs/imports.md``
has the mappings and limits.
"""

from mldiag.imports.errors import ImportFailed
from mldiag.imports.source import Point, SourceRun
from mldiag.imports.writer import Importer, RunReport

__all__ = ["ImportFailed", "Importer", "Point", "RunReport", "SourceRun"]
