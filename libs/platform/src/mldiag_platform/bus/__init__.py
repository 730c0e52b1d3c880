"""NATS JetStream through faststream: one way to build the broker, declare streams,
publish with dedupe and consume with retry and dead-lettering.

Consumers are durable pull consumers with manual acks. A batch handler receives decoded
messages; when it raises, the batch is retried one message at a time so that one poison
message cannot hold back the others. A failing message is redelivered with backoff up to
``max_deliver`` attempts and then republished to ``deadletter.<subject>`` with the reason,
and acked: a poison message never blocks its consumer. A message that cannot even be
decoded (not JSON, nested too deep, an upcaster that fails, a shape no contract has) is
dead-lettered the same way, and the pull loop itself is supervised: if it ever ends by
surprise it is restarted with backoff, and ``/healthz`` and the
``mldiag_bus_consumer_*`` metrics show it.

Nothing reaches a subject unchecked: every token a message contributes (its partition, a run
id or a project) must be a resource id, and every subject published to must be made of
plain tokens, so a bad name is refused where it enters instead of breaking the connection.
"""

from mldiag_platform.bus.connection import Bus, connect_bus
from mldiag_platform.bus.consumer import BatchHandler, Consumer, ConsumerSpec, Delivery
from mldiag_platform.bus.publishing import (
    MessagePublisher,
    Publisher,
    create_broker,
    declare_streams,
    stream_config,
)

__all__ = [
    "BatchHandler",
    "Bus",
    "Consumer",
    "ConsumerSpec",
    "Delivery",
    "MessagePublisher",
    "Publisher",
    "connect_bus",
    "create_broker",
    "declare_streams",
    "stream_config",
]
