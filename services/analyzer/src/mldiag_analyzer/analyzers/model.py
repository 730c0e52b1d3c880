"""Model and optimisation analyzers: what the numbers of the training itself say (non-finite
values, loss spikes, learning rate, gradients, precision)."""

import math
import re

from mldiag_analyzer.analyzers.common import (
    Finding,
    Inputs,
    analyzer,
    found,
    names,
    not_found,
    of_hosts,
)
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import MetricWindow

LR_CHANGE_FACTOR = 1.5
"""(proposed) A learning rate this many times its baseline (or below 1/this) has changed."""
GRADIENT_EXPLOSION_FACTOR = 10.0
"""(proposed) A gradient norm this many times its baseline has exploded."""
_LR = re.compile(r"learning_rate|\blr\b|warmup|schedul|optim", re.IGNORECASE)
_HALF = re.compile(r"float16|fp16|half", re.IGNORECASE)
_LOW = re.compile(r"bfloat16|bf16|fp8|float8|mixed", re.IGNORECASE)


def _describe(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.6g}"


def _windows(inputs: Inputs, *metrics: str) -> list[MetricWindow]:
    return [
        w
        for w in inputs.event.evidence.windows
        if w.metric in metrics and w.observed is not None and w.baseline is not None
    ]


@analyzer("numerical-instability", Layer.MODEL, "numerical-instability.md")
def numerical_instability(inputs: Inputs) -> Finding:
    """Which metric went non-finite or spiked, at which step, and the last good value."""
    evidence = inputs.event.evidence
    where = f" on host {evidence.host}" if evidence.host else ""
    value = evidence.first_bad_value
    if value is not None and math.isfinite(value):
        what = f"spiked to {_describe(value)}"
    else:
        what = f"became {_describe(value) if value is not None else 'non-finite'}"
    if evidence.last_good_step is None or evidence.last_good_value is None:
        before = "No finite value of it was recorded before that."
    else:
        before = (
            f"Its last finite value was {evidence.last_good_value:.6g}"
            f" at step {evidence.last_good_step}."
        )
    details = (
        f"Metric '{evidence.metric}' {what} at step {evidence.first_bad_step}{where}. {before}"
    )
    lines = (
        [f"{evidence.metric} at step {evidence.first_bad_step}: {_describe(value)}"]
        if (value is not None)
        else []
    )
    lines += [
        f"{w.metric}: {w.observed:.6g} against a baseline of {w.baseline:.6g}"
        for w in _windows(inputs, evidence.metric)
        if w.observed is not None and w.baseline is not None
    ]
    actions = [
        f"Resume from the last checkpoint before step {evidence.first_bad_step} with a lower"
        " learning rate or gradient clipping.",
        "Re-run the failing steps with jax.config.update('jax_debug_nans', True) to find the"
        " operation that first produced the non-finite value.",
        "Check the input batch at that step for NaN/Inf or extreme values.",
    ]
    # The symptom itself: a cause found by the other analyzers ranks above it.
    return found(details, 0.5, inputs.event.hosts, lines, actions)


@analyzer("learning-rate-change", Layer.MODEL, "numerical-instability.md")
def learning_rate_change(inputs: Inputs) -> Finding:
    """The learning rate (or its schedule) changed before the instability."""
    changed = [
        w
        for w in _windows(inputs, "learning_rate")
        if w.observed is not None
        and w.baseline is not None
        and w.baseline > 0
        and not 1 / LR_CHANGE_FACTOR < w.observed / w.baseline < LR_CHANGE_FACTOR
    ]
    configs = [
        c for c in (inputs.context.config_changes if inputs.context else []) if _LR.search(c)
    ]
    if not changed and not configs:
        seen = _windows(inputs, "learning_rate")
        return not_found(
            "The learning rate stayed within"
            f" {LR_CHANGE_FACTOR:g}x of its baseline and no optimizer config changed."
            if seen
            else "No learning_rate window in the evidence and no optimizer or schedule config"
            " changed during the run."
        )
    evidence = [
        f"learning_rate: {w.observed:.3g} against {w.baseline:.3g}"
        f" ({(w.observed or 0.0) / (w.baseline or 1.0):.2g}x)"
        for w in changed
    ] + [f"config changed: {c}" for c in configs]
    details = "The learning rate changed before the instability"
    if changed:
        w = changed[0]
        details += f" ({w.baseline:.3g} → {w.observed:.3g}): a warm-up ending or a schedule step"
    else:
        details += f" (optimizer or schedule config changed: {', '.join(configs)})"
    actions = [
        "Check the learning-rate schedule around the first bad step (end of warm-up, a decay"
        " boundary); lengthen the warm-up or lower the peak rate.",
    ]
    return found(details + ".", 0.75 if changed else 0.6, inputs.event.hosts, evidence, actions)


@analyzer("gradient-explosion", Layer.MODEL, "numerical-instability.md")
def gradient_explosion(inputs: Inputs) -> Finding:
    """The gradient norm grew far beyond its baseline before the loss went bad."""
    windows = _windows(inputs, "gradient_norm", "grad_norm")
    exploded = [
        w
        for w in windows
        if w.observed is not None
        and w.baseline is not None
        and w.baseline > 0
        and (not math.isfinite(w.observed) or w.observed / w.baseline >= GRADIENT_EXPLOSION_FACTOR)
    ]
    metric = inputs.event.evidence.metric
    if metric in ("gradient_norm", "grad_norm"):
        exploded = exploded or windows
    if not exploded and metric not in ("gradient_norm", "grad_norm"):
        return not_found(
            f"The gradient norm stayed below {GRADIENT_EXPLOSION_FACTOR:g}x its baseline."
            if windows
            else "No gradient_norm window in the evidence (record gradient_norm to check for"
            " exploding gradients)."
        )
    evidence = [
        f"{w.metric}: {_describe(w.observed or 0.0)} against a baseline of {w.baseline:.3g}"
        for w in exploded
    ]
    details = "The gradients exploded: the gradient norm grew far beyond its baseline"
    actions = [
        "Clip gradients by global norm (`optax.clip_by_global_norm(1.0)`) and resume from the"
        " last good checkpoint.",
    ]
    return found(details + ".", 0.7, inputs.event.hosts, evidence, actions)


@analyzer("precision-overflow", Layer.MODEL, "numerical-instability.md")
def precision_overflow(inputs: Inputs) -> Finding:
    """An infinity from a value exceeding its low-precision dtype's range."""
    value = inputs.event.evidence.first_bad_value
    precisions = [
        f"{h.host} {key}={val}"
        for h in inputs.hosts
        for key, val in h.fingerprint.items()
        if _HALF.search(val) or _LOW.search(val)
    ] + [c for c in (inputs.context.config_changes if inputs.context else []) if _HALF.search(c)]
    half = any(_HALF.search(p) and not _LOW.search(p) for p in precisions)
    if value is None or not math.isinf(value):
        return not_found(
            "The bad value is not an infinity, so an overflow of the dtype's range is not the"
            " first suspect" + (f" (the run uses {precisions[0]})" if precisions else "") + "."
        )
    evidence = [f"first bad value {_describe(value)}"] + [f"precision: {p}" for p in precisions]
    if half:
        details = (
            "The value overflowed to infinity in float16, whose range ends at 65504: use loss"
            " scaling or bfloat16"
        )
        score = 0.7
    else:
        details = (
            "The value overflowed to infinity: an activation, a logit or a sum exceeded its"
            " dtype's range (a softmax without max subtraction, a large exponent)"
        )
        score = 0.5
    actions = [
        "Keep softmax, norms and losses in float32; use dynamic loss scaling with float16.",
    ]
    return found(details + ".", score, inputs.event.hosts, evidence, actions)


@analyzer("single-host-numerics", Layer.MODEL, "numerical-instability.md")
def single_host_numerics(inputs: Inputs) -> Finding:
    """Only some hosts saw the bad value: their input shard, or their chip (silent data
    corruption, if a rerun does not reproduce it)."""
    everyone = {h.host for h in inputs.hosts}
    bad = inputs.event_hosts()
    if len(everyone) < 2 or not bad or not bad < everyone:
        return not_found(
            "The bad value is not confined to some hosts"
            + (f" ({len(everyone)} host(s) in the run)." if everyone else " (hosts unknown).")
        )
    details = (
        f"Only {names(bad)} ({of_hosts(len(bad), len(everyone))}) saw it: its input shard at that"
        " step, or its accelerator (silent data corruption, if a rerun from the same checkpoint"
        " does not reproduce it)"
    )
    actions = [
        f"Inspect the batch {names(bad)} read at step {inputs.event.evidence.first_bad_step}.",
        f"Rerun the step from the same checkpoint; if it is not reproducible, test {names(bad)}'s"
        " accelerators (`dcgmi diag -r 3`).",
    ]
    evidence = [f"hosts with the bad value: {names(bad)}; hosts in the run: {len(everyone)}"]
    return found(details + ".", 0.55, bad, evidence, actions)
