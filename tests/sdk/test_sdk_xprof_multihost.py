"""Two JAX processes (``jax.distributed`` on CPU) trace into one session: process 0 names it
and broadcasts the name, every host uploads its own ``<host>.xplane.pb``, and a process left
out of ``process_index_list`` still takes part in naming but traces nothing."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sdk.fake_platform import FakePlatform
from support import free_port

WORKER = """
import json, os, sys
import jax, jax.numpy as jnp
import mldiag

index = int(sys.argv[1])
jax.distributed.initialize(
    coordinator_address=os.environ["COORDINATOR"], num_processes=2, process_id=index
)
run = mldiag.init(
    run_id="multi-host", api_url=os.environ["URL"], ingestion_url=os.environ["URL"],
    spool_dir=os.environ["SPOOL"], process_index=jax.process_index(), handle_exit=False,
    heartbeat_interval=0, log_system_metrics=False, gcs_path=os.environ["ROOT"],
)
sessions = []
for chosen in (None, [1]):
    with mldiag.xprof(process_index_list=chosen) as prof:
        jnp.ones((32, 32)).sum().block_until_ready()
    sessions.append(prof.session_id)
assert run.finish()
print(json.dumps(sessions))
"""


def test_every_host_traces_into_the_session_process_0_names(
    platform: FakePlatform, tmp_path: Path
) -> None:
    root = tmp_path / "artifacts"
    env = {
        **os.environ,
        "URL": platform.url,
        "SPOOL": str(tmp_path / "spool"),
        "ROOT": f"file://{root}",
        "COORDINATOR": f"127.0.0.1:{free_port()}",
        "JAX_PLATFORMS": "cpu",
        "TMPDIR": str(tmp_path),  # where JAX traces before the upload
    }
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WORKER), str(index)],
            env={**env, "MLDIAG_HOST": f"host-{index}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in (0, 1)
    ]
    outputs = [worker.communicate(timeout=120) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-3000:]
    names = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert names[0] == names[1]  # one session per trace, the same on both hosts
    both, only_second = names[0]
    assert both != only_second

    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.xplane.pb"))
    assert files == sorted(
        [
            f"multi-host/plugins/profile/{both}/host-0.xplane.pb",
            f"multi-host/plugins/profile/{both}/host-1.xplane.pb",
            f"multi-host/plugins/profile/{only_second}/host-1.xplane.pb",
        ]
    )
    succeeded = {(r["sessionId"], r["host"]) for r in platform.received.reports("SUCCEEDED")}
    assert succeeded == {(both, "host-0"), (both, "host-1"), (only_second, "host-1")}
