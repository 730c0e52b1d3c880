"""The analyzers: pure checks of one cause each, grouped by the layer the cause lives in
(infrastructure, orchestrator, framework, model) — with contention on the hosts and causes
read from the run's logs in modules of their own — and the registry of which run per event."""

from mldiag_analyzer.analyzers.common import Analyzer, Inputs
from mldiag_analyzer.analyzers.registry import ANALYZERS, analyzers_for

__all__ = ["ANALYZERS", "Analyzer", "Inputs", "analyzers_for"]
