"""A training loop that checkpoints to ``AIP_CHECKPOINT_DIR`` every step and resumes from
it, then writes its model to ``AIP_MODEL_DIR``: what Vertex asks of restartable code.

``python checkpointed.py STEPS SECONDS_PER_STEP``. Every start appends a line (attempt,
first step) to ``starts.jsonl`` in the checkpoint directory, so a test can tell a resume
from a fresh start and count how often it ran.
"""

import json
import os
import sys
import time
from pathlib import Path

steps, pause = int(sys.argv[1]), float(sys.argv[2])
checkpoints = Path(os.environ["AIP_CHECKPOINT_DIR"])
checkpoints.mkdir(parents=True, exist_ok=True)
checkpoint = checkpoints / "checkpoint.json"
first = json.loads(checkpoint.read_text())["step"] + 1 if checkpoint.exists() else 0
with (checkpoints / "starts.jsonl").open("a") as starts:
    starts.write(json.dumps({"attempt": os.environ.get("MLDIAG_ATTEMPT"), "first": first}) + "\n")
print(f"pid {os.getpid()} starting at step {first}", flush=True)  # noqa: T201  # the job's log is its output

weight = 0.0
for step in range(first, steps):
    weight += 0.5
    time.sleep(pause)
    partial = checkpoint.with_suffix(".tmp")
    partial.write_text(json.dumps({"step": step, "weight": weight}))
    partial.replace(checkpoint)  # atomic: a kill never leaves half a checkpoint

model = Path(os.environ["AIP_MODEL_DIR"])
model.mkdir(parents=True, exist_ok=True)
(model / "model.json").write_text(json.dumps({"steps": steps, "resumedAt": first}))
print(f"done: {steps} steps, resumed at {first}", flush=True)  # noqa: T201  # the job's log is its output
