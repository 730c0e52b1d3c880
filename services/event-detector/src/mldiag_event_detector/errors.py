"""event-detector's errors."""

from mldiag_platform.errors import MldiagError


class DetectorError(MldiagError):
    """Base of the detector's own errors."""

    code = "detector_error"
