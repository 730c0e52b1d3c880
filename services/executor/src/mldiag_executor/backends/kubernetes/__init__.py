"""The Kubernetes backend: one Indexed Job per pool of a job attempt, a headless Service for
stable replica names, and a Secret for the run token. **It has not run against a cluster**:
the manifests are rendered and validated (golden files, the official client's models,
kubernetes-validate); the client calls follow the API's documented behaviour.

Rendering (:func:`render_attempt`, pure) takes the ``StartReplica`` commands of one job
attempt (the scheduler sends them together; the backend collects them for
``collect_seconds``) and makes:

- ``Secret <base>-token``: ``MLDIAG_TOKEN``, so the token is not in the Job's spec.
- ``Service <base>`` (headless, ``publishNotReadyAddresses``): the pods' subdomain.
- ``Job <base>-wp<pool>`` per pool: ``completionMode: Indexed``, ``completions =
  parallelism`` = the pool's replicas here, ``restartPolicy: Never``,
  ``backoffLimitPerIndex`` (default 0: the scheduler owns restarts), ``podFailurePolicy``
  (``Ignore`` on ``DisruptionTarget``: a preempted or evicted pod is replaced without
  counting; ``FailIndex`` on the permanent exit codes 126 and 127), ``podReplacementPolicy:
  Failed`` (never two pods of one index), ``activeDeadlineSeconds`` from the deadline,
  requests and limits from the machine spec (``nvidia.com/gpu``, ``google.com/tpu``), a
  ``nodeSelector`` from the accelerator type (GKE's labels).

``<base>`` is ``mldiag-<job>-a<attempt>``; an Indexed Job's pod ``k`` is named
``<base>-wp<pool>-<k>`` with the Service as subdomain, so its DNS name is
``<base>-wp<pool>-<k>.<base>``. The scheduler wrote ``<executor address>:<port>`` into the
environment; :func:`~mldiag_executor.backends.addresses.rewrite_addresses` turns each into
the DNS name of the pod that replica runs in. The Job's template is shared by its indices:
what differs between replicas (``CLUSTER_SPEC``'s task, ``RANK``, ``MLDIAG_REPLICA`` …) goes
into ``MLDIAG_INDEX_ENV`` (JSON: completion index → variables), and a few lines of Python
in front of the launcher apply the entry of ``$JOB_COMPLETION_INDEX`` and exec
``mldiag run --replica <name> -- <command>``. The image needs ``python`` and the mldiag
SDK (the launcher).
"""

from mldiag_executor.backends.kubernetes.backend import KubernetesBackend, create, own_namespace
from mldiag_executor.backends.kubernetes.manifests import (
    CONTAINER,
    ENTRYPOINT,
    INDEX_ENV,
    IndexEnd,
    base_name,
    container_resources,
    index_ends,
    job_name,
    node_selector,
    parse_indexes,
    pod_hosts,
    quantity_cpu,
    quantity_memory,
    render_attempt,
)
from mldiag_executor.backends.kubernetes.settings import KubernetesBackendSettings

__all__ = [
    "CONTAINER",
    "ENTRYPOINT",
    "INDEX_ENV",
    "IndexEnd",
    "KubernetesBackend",
    "KubernetesBackendSettings",
    "base_name",
    "container_resources",
    "create",
    "index_ends",
    "job_name",
    "node_selector",
    "own_namespace",
    "parse_indexes",
    "pod_hosts",
    "quantity_cpu",
    "quantity_memory",
    "render_attempt",
]
