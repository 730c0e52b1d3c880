"""Model analyzers: the instability itself, and the learning rate, gradients, precision and
hosts around it."""

import math

from analyzer.analyzer_contexts import (
    FINGERPRINT,
    context,
    detected,
    hosts,
    non_finite,
    run,
)
from mldiag_analyzer.analyzers.model import (
    gradient_explosion,
    learning_rate_change,
    numerical_instability,
    precision_overflow,
    single_host_numerics,
)
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import MetricWindow


def test_report_names_metric_step_and_last_good_value() -> None:
    report = run(numerical_instability, *non_finite())
    assert detected(report)
    assert report.layer is Layer.MODEL
    assert report.details == (
        "Metric 'loss' became NaN at step 42 on host host-3. "
        "Its last finite value was 0.125 at step 41."
    )
    assert report.hosts == ["host-3"]
    assert report.evidence == ["loss at step 42: NaN"]
    assert all(
        action.documentation_url == "docs/runbooks/numerical-instability.md"
        for action in report.recommended_actions
    )


def test_report_without_a_good_value() -> None:
    report = run(numerical_instability, *non_finite(last_good_step=None, last_good_value=None))
    assert "No finite value of it was recorded before that." in report.details


def test_a_loss_spike_is_described_as_a_spike() -> None:
    report = run(numerical_instability, *non_finite(value=45.2, hosts_=[]))
    assert report.details.startswith("Metric 'loss' spiked to 45.2 at step 42. ")


def test_learning_rate_jump_before_the_nan() -> None:
    lr = MetricWindow(metric="learning_rate", observed=3e-4, baseline=1e-4, count=5)
    report = run(learning_rate_change, *non_finite(windows=[lr]))
    assert detected(report)
    assert report.score == 0.75
    assert "0.0001 → 0.0003" in report.details
    steady = MetricWindow(metric="learning_rate", observed=1.1e-4, baseline=1e-4, count=5)
    assert not detected(run(learning_rate_change, *non_finite(windows=[steady])))
    event, _ = non_finite()
    by_config = run(
        learning_rate_change, event, context(config_changes=["userConfigs.warmup_steps"])
    )
    assert detected(by_config)
    assert by_config.score == 0.6


def test_gradient_explosion() -> None:
    grads = MetricWindow(metric="gradient_norm", observed=250.0, baseline=1.2, count=5)
    report = run(gradient_explosion, *non_finite(windows=[grads]))
    assert detected(report)
    assert report.evidence == ["gradient_norm: 250 against a baseline of 1.2"]
    missing = run(gradient_explosion, *non_finite())
    assert not detected(missing)
    assert "No gradient_norm window" in missing.details


def test_an_infinity_in_float16_is_an_overflow() -> None:
    event, _ = non_finite(value=math.inf)
    half = context(hosts(host_0={"fingerprint": {**FINGERPRINT, "dtype": "float16"}}))
    report = run(precision_overflow, event, half)
    assert detected(report)
    assert report.score == 0.7
    assert "65504" in report.details
    assert run(precision_overflow, event, context()).score == 0.5
    assert not detected(run(precision_overflow, *non_finite()))


def test_a_bad_value_on_one_host_of_many() -> None:
    report = run(single_host_numerics, *non_finite())
    assert detected(report)
    assert report.hosts == ["host-3"]
    assert "silent data corruption" in report.details
    everywhere = run(single_host_numerics, *non_finite(hosts_=[f"host-{i}" for i in range(4)]))
    assert not detected(everywhere)
