"""Detection rules, by layer of the signals they read (see docs/monitoring.md).

Edge rules run as the signal they read is folded in (a NaN, a checkpoint, a restart, a
signal); level rules run once per applied batch over the windows in the run's state; the
hang rule also runs on the detector's clock.
"""
