"""analyzer's errors."""

from mldiag_platform.errors import MldiagError


class NoAnalyzerForEvent(MldiagError):
    """No analyzer knows this event type (a newer detector than this analyzer)."""

    code = "no_analyzer_for_event"
    # Retrying will not help, but an upgraded analyzer replaying the dead letter will.
    retryable = False
