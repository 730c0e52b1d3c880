"""HyperparameterTuningJob bodies as the Vertex SDK sends them, for the tuning tests."""

from typing import Any

from training.jobs.bodies import container_pool


def study_spec(**overrides: Any) -> dict[str, Any]:
    """A one-metric study over a learning rate (log scale) and a batch size."""
    return {
        "metrics": [{"metricId": "loss", "goal": 2}],  # MINIMIZE, as a number
        "parameters": [
            {
                "parameterId": "lr",
                "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1},
                "scaleType": 2,  # UNIT_LOG_SCALE
            },
            {"parameterId": "batch", "discreteValueSpec": {"values": [16, 32, 64]}},
        ],
        **overrides,
    }


def sdk_tuning_job(**fields: Any) -> dict[str, Any]:
    """A HyperparameterTuningJob body as ``aiplatform.HyperparameterTuningJob.run()``
    sends it."""
    return {
        "displayName": "sweep",
        "studySpec": study_spec(),
        "maxTrialCount": 4,
        "parallelTrialCount": 2,
        "trialJobSpec": {
            "workerPoolSpecs": [container_pool()],
            "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/hpt"},
        },
        **fields,
    }
