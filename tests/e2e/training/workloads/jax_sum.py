"""A two-process JAX job: it joins ``jax.distributed`` from the environment the platform
gives each replica (no address or rank in the code) and sums a value across processes.

Each process contributes ``10 * (JAX_PROCESS_ID + 1)``; the chief writes the all-gathered
sum to ``$AIP_MODEL_DIR/sum.json``.
"""

import json
import os
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(  # the coordinator's address comes from JAX_COORDINATOR_ADDRESS
    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
    process_id=int(os.environ["JAX_PROCESS_ID"]),
)
mine = np.array([10.0 * (jax.process_index() + 1)])
gathered = multihost_utils.process_allgather(mine)
total = float(np.sum(gathered))
print(f"process {jax.process_index()} of {jax.process_count()}: sum {total}", flush=True)  # noqa: T201  # the job's log is its output
if jax.process_index() == 0:
    out = Path(os.environ["AIP_MODEL_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "sum.json").write_text(json.dumps({"sum": total, "processes": jax.process_count()}))
jax.distributed.shutdown()
