"""Run a hyperparameter tuning job with the real ``google-cloud-aiplatform`` SDK against
mldiag (run in the SDK's own venv, like ``vertex_client.py``).

``python tuning_vertex_client.py <api url> <token> <image> <trial script>`` runs
``aiplatform.HyperparameterTuningJob(...).run()`` over ``tuning_trial.py`` and prints one JSON
object with what the SDK saw: the job's state, every trial's parameters and final
measurement, the job fetched back and listed, and the SDK's enum numbers.
"""

import json
import sys
from typing import Any

from google.cloud import aiplatform
from google.cloud.aiplatform import hyperparameter_tuning as hpt
from google.oauth2.credentials import Credentials


def run_study(image: str, script: str) -> dict[str, Any]:
    trial_job = aiplatform.CustomJob(
        display_name="vertex-tuning-trial",
        worker_pool_specs=[
            {
                "machine_spec": {"machine_type": "e2-standard-4"},
                "replica_count": 1,
                "container_spec": {"image_uri": image, "command": ["python", script]},
            }
        ],
    )
    job = aiplatform.HyperparameterTuningJob(
        display_name="vertex-tuning",
        custom_job=trial_job,
        metric_spec={"loss": "minimize"},
        parameter_spec={
            "lr": hpt.DoubleParameterSpec(min=0.001, max=0.1, scale="log"),
            "layers": hpt.IntegerParameterSpec(min=1, max=4, scale="linear"),
        },
        max_trial_count=4,
        parallel_trial_count=2,
    )
    job.run(sync=True)
    fetched = aiplatform.HyperparameterTuningJob.get(job.resource_name)
    listed = [j.resource_name for j in aiplatform.HyperparameterTuningJob.list()]
    trials = []
    for trial in job.trials:
        final = trial.final_measurement
        trials.append(
            {
                "id": trial.id,
                "state": trial.state.name,
                "parameters": {p.parameter_id: p.value for p in trial.parameters},
                "final": {m.metric_id: m.value for m in final.metrics} if final else None,
                "step": final.step_count if final else None,
                "customJob": trial.custom_job,
            }
        )
    return {
        "name": job.resource_name,
        "state": job.state.name,
        "fetchedState": fetched.state.name,
        "listed": job.resource_name in listed,
        "trials": trials,
    }


def main() -> None:
    api, token, image, script = sys.argv[1:]
    aiplatform.init(
        project="default",
        location="us-central1",
        api_endpoint=api,
        api_transport="rest",
        credentials=Credentials(token=token),
        staging_bucket="gs://mldiag-staging",
    )
    print(json.dumps(run_study(image, script)))  # noqa: T201


if __name__ == "__main__":
    main()
