"""A tuning trial as Vertex users write them: its hyperparameters arrive as ``--lr=…
--layers=…``, and ``cloudml-hypertune`` (unchanged) reports ``loss`` at three steps.

The loss is lowest near ``lr = 0.01`` with many layers, so the study has a clear best.
"""

import argparse
import math
import os
import time

import hypertune

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--layers", type=int, required=True)
args, _ = parser.parse_known_args()

reporter = hypertune.HyperTune()
quality = math.log10(args.lr / 0.01) ** 2 + 1.0 / args.layers
for step in (1, 2, 3):
    time.sleep(0.1)
    reporter.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag="loss", metric_value=quality + 1.0 / step, global_step=step
    )
print("trial", os.environ.get("CLOUD_ML_TRIAL_ID"), "lr", args.lr, "layers", args.layers)  # noqa: T201
