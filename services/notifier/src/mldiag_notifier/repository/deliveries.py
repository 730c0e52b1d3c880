"""Deliveries: deciding them (OPENED, RESOLVED, grouped, rate limited), claiming the due
ones, recording each attempt, and the history.

Deciding a delivery takes a transaction-scoped advisory lock on its (project, location,
rule, channel), so the grouping window and the hourly count it reads cannot change under it
(two replicas deciding two events of one run serialise here). Sending claims due rows with
``FOR UPDATE SKIP LOCKED`` and moves their next attempt past the claim, so a row is sent by
one replica at a time; one whose sender crashed comes due again when the claim runs out.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from mldiag_notifier.repository.common import Table, lock_event
from mldiag_notifier.routing import RunFacts, delivery_id, group_delivery_id
from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_platform.listing.sql import keyset_sql, order_sql, where_sql
from mldiag_schemas.alerts import (
    AlertRule,
    DeliveryState,
    NotificationDelivery,
    NotificationKind,
)
from mldiag_schemas.events import WorkloadEvent

GROUPED = "grouped"
"""``lastError`` of a delivery folded into a grouped notification."""
RATE_LIMITED = "rate limited"
"""``lastError`` of a delivery over its rule's ``maxPerHour``."""

DELIVERY_COLUMNS = {
    "event_id": "event_id::text",
    "run_id": "run_id",
    "channel": "channel",
    "rule": "rule",
    "state": "state",
    "kind": "kind",
    "create_time": "create_time",
    "delivery_id": "delivery_id::text",
}
"""Filter and order fields of the delivery list → columns."""

_DELIVERY = (
    "delivery_id, project, location, channel, rule, kind, run_id, event_id, event, state,"
    " attempts, last_error, is_group, grouped_into, create_time, next_attempt_time,"
    " deliver_time"
)


def delivery_name(project: str, location: str, delivery: uuid.UUID) -> str:
    """A delivery's resource name."""
    return f"projects/{project}/locations/{location}/notificationDeliveries/{delivery}"


@dataclass(frozen=True)
class DeliveryRow:
    """A delivery with what sending it needs: the event snapshot and its grouping."""

    delivery: NotificationDelivery
    project: str
    location: str
    event: WorkloadEvent | None
    is_group: bool


@dataclass(frozen=True)
class Plan:
    """One delivery to decide: a rule routed an event to a channel."""

    rule: AlertRule
    channel: str


def _delivery(row: asyncpg.Record) -> DeliveryRow:
    delivery = NotificationDelivery(
        name=delivery_name(row["project"], row["location"], row["delivery_id"]),
        delivery_id=row["delivery_id"],
        channel=row["channel"],
        rule=row["rule"],
        kind=NotificationKind(row["kind"]),
        run_id=row["run_id"],
        event_id=row["event_id"],
        state=DeliveryState(row["state"]),
        attempts=row["attempts"],
        last_error=row["last_error"],
        create_time=row["create_time"],
        next_attempt_time=row["next_attempt_time"],
        deliver_time=row["deliver_time"],
    )
    event = WorkloadEvent.model_validate_json(row["event"]) if row["event"] else None
    return DeliveryRow(delivery, row["project"], row["location"], event, row["is_group"])


class DeliveriesTable(Table):
    """Deliveries: decided, sent, and listed."""

    # --- deciding ---

    async def decide_opened(
        self, run: RunFacts, event: WorkloadEvent, plans: Sequence[Plan], wait_seconds: float
    ) -> int:
        """Store the OPENED delivery of every plan (PENDING, SUPPRESSED as grouped or rate
        limited); a plan decided before is left alone. Returns how many were queued."""
        queued = 0
        snapshot = event.model_dump_json()
        async with self._pool.acquire() as conn, conn.transaction():
            await lock_event(conn, event.event_id)
            analysed = await conn.fetchval(
                "SELECT true FROM analyses WHERE event_id = $1", event.event_id
            )
            wait = 0.0 if analysed else wait_seconds
            # One order of locks for every transaction, so two never wait on each other.
            for plan in sorted(plans, key=lambda plan: (plan.rule.rule_id, plan.channel)):
                rule_id = plan.rule.rule_id
                await self._lock(conn, run, rule_id, plan.channel)
                own_id = delivery_id(event.event_id, NotificationKind.OPENED, rule_id, plan.channel)
                if await self._exists(conn, own_id):
                    continue
                state, reason, group = DeliveryState.PENDING, "", None
                leader = await self._leader(conn, run, plan)
                if leader is not None:
                    group = group_delivery_id(leader["delivery_id"])
                    state, reason = DeliveryState.SUPPRESSED, GROUPED
                    due = leader["create_time"] + timedelta(seconds=plan.rule.group_window_seconds)
                    # The grouped notification counts against the hour like any other.
                    group_over = not await self._exists(conn, group) and await self._over_limit(
                        conn, run, plan
                    )
                    queued += await self._insert(
                        conn,
                        run,
                        plan,
                        group,
                        event,
                        snapshot,
                        due=due,
                        is_group=True,
                        state=DeliveryState.SUPPRESSED if group_over else DeliveryState.PENDING,
                        reason=RATE_LIMITED if group_over else "",
                    )
                elif await self._over_limit(conn, run, plan):
                    state, reason = DeliveryState.SUPPRESSED, RATE_LIMITED
                queued += await self._insert(
                    conn,
                    run,
                    plan,
                    own_id,
                    event,
                    snapshot,
                    state=state,
                    reason=reason,
                    grouped_into=group,
                    wait=wait,
                )
        return queued

    async def decide_resolved(
        self, run: RunFacts, event: WorkloadEvent, rules: dict[str, AlertRule]
    ) -> int:
        """Store the RESOLVED delivery of every (rule, channel) that notified the event's
        opening (delivered, on its way, or suppressed) when the rule still wants it. An
        opening folded into a grouped notification is resolved SUPPRESSED as grouped: one
        notification told of the group, so one resolution per event would flood the same
        channel the grouping spared."""
        queued = 0
        snapshot = event.model_dump_json()
        async with self._pool.acquire() as conn, conn.transaction():
            # After the opening's own attempt when that one is still to go (waiting for the
            # analysis, or retrying), so a quick recovery does not overtake it.
            opened = await conn.fetch(
                """SELECT rule, channel, max(next_attempt_time)
                       FILTER (WHERE state IN ('PENDING', 'RETRYING')) AS opened_due,
                       bool_or(grouped_into IS NOT NULL) AS grouped
                   FROM deliveries
                   WHERE event_id = $1 AND kind = 'OPENED' AND NOT is_group AND state <> 'DEAD'
                   GROUP BY rule, channel ORDER BY rule, channel""",
                event.event_id,
            )
            for row in opened:
                rule = rules.get(row["rule"])
                if rule is None or not rule.enabled or not rule.notify_on_resolve:
                    continue
                plan = Plan(rule, row["channel"])
                await self._lock(conn, run, rule.rule_id, plan.channel)
                own_id = delivery_id(
                    event.event_id, NotificationKind.RESOLVED, rule.rule_id, plan.channel
                )
                state, reason = DeliveryState.PENDING, ""
                if row["grouped"]:
                    state, reason = DeliveryState.SUPPRESSED, GROUPED
                elif await self._over_limit(conn, run, plan):
                    state, reason = DeliveryState.SUPPRESSED, RATE_LIMITED
                queued += await self._insert(
                    conn,
                    run,
                    plan,
                    own_id,
                    event,
                    snapshot,
                    kind=NotificationKind.RESOLVED,
                    state=state,
                    reason=reason,
                    due=row["opened_due"],
                )
        return queued

    @staticmethod
    async def _exists(conn: asyncpg.Connection, delivery: uuid.UUID) -> bool:
        found = await conn.fetchval("SELECT true FROM deliveries WHERE delivery_id = $1", delivery)
        return bool(found)

    @staticmethod
    async def _lock(conn: asyncpg.Connection, run: RunFacts, rule: str, channel: str) -> None:
        key = f"notifier:{run.project}/{run.location}/{rule}/{channel}"
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)

    @staticmethod
    async def _leader(conn: asyncpg.Connection, run: RunFacts, plan: Plan) -> Any:
        """The notified OPENED delivery of the run, rule and channel whose grouping window
        is still open, if any."""
        if plan.rule.group_window_seconds <= 0:
            return None
        return await conn.fetchrow(
            """SELECT delivery_id, create_time FROM deliveries
               WHERE project = $1 AND location = $2 AND rule = $3 AND channel = $4
                   AND run_id = $5 AND kind = 'OPENED' AND NOT is_group
                   AND grouped_into IS NULL AND state <> 'SUPPRESSED'
                   AND create_time > now() - make_interval(secs => $6)
               ORDER BY create_time DESC LIMIT 1""",
            run.project,
            run.location,
            plan.rule.rule_id,
            plan.channel,
            run.run_id,
            plan.rule.group_window_seconds,
        )

    @staticmethod
    async def _over_limit(conn: asyncpg.Connection, run: RunFacts, plan: Plan) -> bool:
        """Whether the rule and channel have sent (or are sending) ``maxPerHour`` in the
        last hour."""
        sent = await conn.fetchval(
            """SELECT count(*) FROM deliveries
               WHERE project = $1 AND location = $2 AND rule = $3 AND channel = $4
                   AND kind <> 'TEST' AND state <> 'SUPPRESSED'
                   AND create_time > now() - interval '1 hour'""",
            run.project,
            run.location,
            plan.rule.rule_id,
            plan.channel,
        )
        return int(sent) >= plan.rule.max_per_hour

    @staticmethod
    async def _insert(
        conn: asyncpg.Connection,
        run: RunFacts,
        plan: Plan,
        own_id: uuid.UUID,
        event: WorkloadEvent,
        snapshot: str,
        *,
        kind: NotificationKind = NotificationKind.OPENED,
        state: DeliveryState = DeliveryState.PENDING,
        reason: str = "",
        grouped_into: uuid.UUID | None = None,
        is_group: bool = False,
        wait: float = 0.0,
        due: datetime | None = None,
    ) -> int:
        """Insert one delivery (nothing when its id exists); 1 when it was queued."""
        pending = state is DeliveryState.PENDING
        status = await conn.execute(
            """INSERT INTO deliveries (delivery_id, project, location, channel, rule, kind,
                   run_id, event_id, event, state, last_error, is_group, grouped_into,
                   next_attempt_time)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                   CASE WHEN $14 THEN coalesce($15, now() + make_interval(secs => $16)) END)
               ON CONFLICT (delivery_id) DO NOTHING""",
            own_id,
            run.project,
            run.location,
            plan.channel,
            plan.rule.rule_id,
            kind.value,
            run.run_id,
            event.event_id,
            snapshot,
            state.value,
            reason,
            is_group,
            grouped_into,
            pending,
            due,
            wait,
        )
        return 1 if pending and str(status).endswith(" 1") else 0

    # --- sending ---

    async def claim_due(self, limit: int, claim_seconds: float) -> list[DeliveryRow]:
        """Due deliveries, held for ``claim_seconds`` by this replica (others skip them)."""
        rows = await self._pool.fetch(
            f"""WITH due AS (
                    SELECT delivery_id FROM deliveries
                    WHERE state IN ('PENDING', 'RETRYING') AND next_attempt_time <= now()
                    ORDER BY next_attempt_time LIMIT $1 FOR UPDATE SKIP LOCKED)
                UPDATE deliveries d
                SET next_attempt_time = now() + make_interval(secs => $2)
                FROM due WHERE d.delivery_id = due.delivery_id
                RETURNING {", ".join("d." + column.strip() for column in _DELIVERY.split(","))}""",
            limit,
            claim_seconds,
        )
        return [_delivery(row) for row in rows]

    async def next_due_in(self) -> float | None:
        """Seconds until the next delivery is due (None when none waits)."""
        value = await self._pool.fetchval(
            """SELECT extract(epoch FROM min(next_attempt_time) - now()) FROM deliveries
               WHERE state IN ('PENDING', 'RETRYING')"""
        )
        return None if value is None else float(value)

    async def grouped_events(self, group: uuid.UUID) -> list[WorkloadEvent]:
        """The events folded into a grouped notification, in the order they opened."""
        rows = await self._pool.fetch(
            """SELECT event FROM deliveries WHERE grouped_into = $1
               ORDER BY create_time, delivery_id""",
            group,
        )
        return [WorkloadEvent.model_validate_json(row["event"]) for row in rows]

    async def settle(
        self,
        delivery: uuid.UUID,
        state: DeliveryState,
        attempts: int,
        last_error: str,
        retry_in: float | None = None,
    ) -> None:
        """Record an attempt's outcome: DELIVERED, DEAD, or RETRYING after ``retry_in``."""
        await self._pool.execute(
            """UPDATE deliveries SET state = $2, attempts = $3, last_error = $4,
                   next_attempt_time = CASE WHEN $5::float8 IS NULL THEN NULL
                       ELSE now() + make_interval(secs => $5::float8) END,
                   deliver_time = CASE WHEN $2 = 'DELIVERED' THEN now() END
               WHERE delivery_id = $1""",
            delivery,
            state.value,
            attempts,
            last_error,
            retry_in,
        )

    async def record_test(
        self,
        project: str,
        location: str,
        channel: str,
        delivered: bool,
        error: str,
    ) -> NotificationDelivery:
        """Store the one attempt of a TEST send."""
        row = await self._pool.fetchrow(
            f"""INSERT INTO deliveries (delivery_id, project, location, channel, kind, state,
                   attempts, last_error, deliver_time)
               VALUES ($1, $2, $3, $4, 'TEST', $5, 1, $6, CASE WHEN $7 THEN now() END)
               RETURNING {_DELIVERY}""",
            uuid.uuid4(),
            project,
            location,
            channel,
            (DeliveryState.DELIVERED if delivered else DeliveryState.DEAD).value,
            error,
            delivered,
        )
        return _delivery(row).delivery

    async def delivery(self, delivery: uuid.UUID) -> DeliveryRow | None:
        """One delivery by id."""
        row = await self._pool.fetchrow(
            f"SELECT {_DELIVERY} FROM deliveries WHERE delivery_id = $1", delivery
        )
        return _delivery(row) if row else None

    async def list_deliveries(
        self,
        project: str,
        location: str,
        where: Expr | None,
        order: Sequence[OrderKey],
        after: Sequence[object] | None,
        limit: int,
    ) -> list[NotificationDelivery]:
        """One page of deliveries (``limit`` rows) in ``order``, after the position
        ``after``."""
        params: list[object] = [project, location]
        conditions = ["project = $1", "location = $2"]
        if where is not None:
            conditions.append(where_sql(where, params, DELIVERY_COLUMNS))
        if after is not None:
            conditions.append(keyset_sql(order, after, params, DELIVERY_COLUMNS))
        params.append(limit)
        rows = await self._pool.fetch(
            f"""SELECT {_DELIVERY} FROM deliveries WHERE {" AND ".join(conditions)}
                ORDER BY {order_sql(order, DELIVERY_COLUMNS)} LIMIT ${len(params)}""",
            *params,
        )
        return [_delivery(row).delivery for row in rows]
