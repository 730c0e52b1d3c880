"""The notifier's tables: the runs read model, channels, rules, analyses and deliveries.

Deciding a delivery takes a transaction-scoped advisory lock on its (project, location,
rule, channel), so the grouping window and the hourly count it reads cannot change under it
(two replicas deciding two events of one run serialise here). Sending claims due rows with
``FOR UPDATE SKIP LOCKED`` and moves their next attempt past the claim, so a row is sent by
one replica at a time; one whose sender crashed comes due again when the claim runs out.
"""

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from mldiag_notifier.routing import RunFacts, delivery_id, group_delivery_id
from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_platform.listing.sql import keyset_sql, order_sql, where_sql
from mldiag_schemas.alerts import (
    AlertRule,
    ChannelKind,
    DeliveryState,
    NotificationChannel,
    NotificationDelivery,
    NotificationKind,
    TopCause,
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


def channel_name(project: str, location: str, channel_id: str) -> str:
    """A channel's resource name."""
    return f"projects/{project}/locations/{location}/notificationChannels/{channel_id}"


def rule_name(project: str, location: str, rule_id: str) -> str:
    """A rule's resource name."""
    return f"projects/{project}/locations/{location}/alertRules/{rule_id}"


def delivery_name(project: str, location: str, delivery: uuid.UUID) -> str:
    """A delivery's resource name."""
    return f"projects/{project}/locations/{location}/notificationDeliveries/{delivery}"


@dataclass(frozen=True)
class StoredChannel:
    """A channel as stored: its resource (secrets empty) and its sealed secrets."""

    channel: NotificationChannel
    sealed: bytes


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


def _channel(row: asyncpg.Record) -> StoredChannel:
    channel = NotificationChannel(
        name=channel_name(row["project"], row["location"], row["channel_id"]),
        channel_id=row["channel_id"],
        display_name=row["display_name"],
        kind=ChannelKind(row["kind"]),
        config=json.loads(row["config"]),
        secret_keys=list(row["secret_keys"]),
        enabled=row["enabled"],
        create_time=row["create_time"],
        update_time=row["update_time"],
    )
    return StoredChannel(channel, bytes(row["secrets"]))


def _rule(row: asyncpg.Record) -> AlertRule:
    body: dict[str, Any] = json.loads(row["rule"])
    return AlertRule.model_validate(
        {
            **body,
            "name": rule_name(row["project"], row["location"], row["rule_id"]),
            "ruleId": row["rule_id"],
            "createTime": row["create_time"],
            "updateTime": row["update_time"],
        }
    )


def _rule_body(rule: AlertRule) -> str:
    return rule.model_dump_json(exclude={"name", "rule_id", "create_time", "update_time"})


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


class NotifierRepository:
    """Every query of the notifier."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    # --- runs (read model) ---

    async def save_run(self, run: RunFacts, deleted: bool, update_time: datetime) -> None:
        """Upsert a run's facts unless a later fact is stored already."""
        await self._pool.execute(
            """INSERT INTO runs (run_id, project, location, name, display_name, run_set,
                   labels, deleted, update_time)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
               ON CONFLICT (run_id) DO UPDATE SET project = EXCLUDED.project,
                   location = EXCLUDED.location, name = EXCLUDED.name,
                   display_name = EXCLUDED.display_name, run_set = EXCLUDED.run_set,
                   labels = EXCLUDED.labels, deleted = runs.deleted OR EXCLUDED.deleted,
                   update_time = EXCLUDED.update_time
               WHERE runs.update_time <= EXCLUDED.update_time OR EXCLUDED.deleted""",
            run.run_id,
            run.project,
            run.location,
            run.name,
            run.display_name,
            run.run_set,
            json.dumps(run.labels),
            deleted,
            update_time,
        )

    async def run(self, run_id: str) -> RunFacts | None:
        """A run's facts (a deleted run's too: its last events still notify)."""
        row = await self._pool.fetchrow("SELECT * FROM runs WHERE run_id = $1", run_id)
        if row is None:
            return None
        return RunFacts(
            run_id=row["run_id"],
            project=row["project"],
            location=row["location"],
            name=row["name"],
            display_name=row["display_name"],
            run_set=row["run_set"],
            labels=json.loads(row["labels"]),
        )

    # --- channels ---

    async def insert_channel(
        self, project: str, location: str, channel: NotificationChannel, sealed: bytes
    ) -> StoredChannel | None:
        """Store a new channel; None when its id is taken."""
        try:
            row = await self._pool.fetchrow(
                """INSERT INTO channels (project, location, channel_id, display_name, kind,
                       config, secrets, secret_keys, enabled)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *""",
                project,
                location,
                channel.channel_id,
                channel.display_name,
                channel.kind.value,
                json.dumps(channel.config),
                sealed,
                sorted(channel.secrets),
                channel.enabled,
            )
        except asyncpg.UniqueViolationError:
            return None
        return _channel(row)

    async def channel(self, project: str, location: str, channel_id: str) -> StoredChannel | None:
        """One channel, or None."""
        row = await self._pool.fetchrow(
            "SELECT * FROM channels WHERE project = $1 AND location = $2 AND channel_id = $3",
            project,
            location,
            channel_id,
        )
        return _channel(row) if row else None

    async def channels(
        self, project: str, location: str, size: int, after: str | None
    ) -> list[StoredChannel]:
        """Up to ``size`` channels by id, after the id ``after``."""
        rows = await self._pool.fetch(
            """SELECT * FROM channels WHERE project = $1 AND location = $2
                   AND ($3::text IS NULL OR channel_id > $3)
               ORDER BY channel_id LIMIT $4""",
            project,
            location,
            after,
            size,
        )
        return [_channel(row) for row in rows]

    async def update_channel(
        self, project: str, location: str, channel: NotificationChannel, sealed: bytes
    ) -> StoredChannel | None:
        """Replace a channel's changeable fields; None when it is gone."""
        row = await self._pool.fetchrow(
            """UPDATE channels SET display_name = $4, config = $5, secrets = $6,
                   secret_keys = $7, enabled = $8, update_time = now()
               WHERE project = $1 AND location = $2 AND channel_id = $3 RETURNING *""",
            project,
            location,
            channel.channel_id,
            channel.display_name,
            json.dumps(channel.config),
            sealed,
            sorted(channel.secret_keys),
            channel.enabled,
        )
        return _channel(row) if row else None

    async def delete_channel(
        self, project: str, location: str, channel_id: str
    ) -> tuple[bool, list[str]]:
        """Delete a channel no rule names: (deleted, the rules naming it)."""
        async with self._pool.acquire() as conn, conn.transaction():
            # Locked first, so a rule naming it cannot be created between check and delete.
            found = await conn.fetchval(
                """SELECT true FROM channels WHERE project = $1 AND location = $2
                       AND channel_id = $3 FOR UPDATE""",
                project,
                location,
                channel_id,
            )
            if not found:
                return False, []
            users = await conn.fetch(
                """SELECT rule_id FROM rules WHERE project = $1 AND location = $2
                       AND channels @> ARRAY[$3]::text[] ORDER BY rule_id""",
                project,
                location,
                channel_id,
            )
            if users:
                return False, [row["rule_id"] for row in users]
            await conn.execute(
                "DELETE FROM channels WHERE project = $1 AND location = $2 AND channel_id = $3",
                project,
                location,
                channel_id,
            )
            return True, []

    # --- rules ---

    async def _missing_channels(
        self, conn: asyncpg.Connection, project: str, location: str, channels: Sequence[str]
    ) -> list[str]:
        # FOR SHARE: a named channel cannot be deleted before this transaction ends.
        rows = await conn.fetch(
            """SELECT channel_id FROM channels WHERE project = $1 AND location = $2
                   AND channel_id = ANY($3::text[]) FOR SHARE""",
            project,
            location,
            list(channels),
        )
        found = {row["channel_id"] for row in rows}
        return [channel for channel in channels if channel not in found]

    async def insert_rule(
        self, project: str, location: str, rule: AlertRule
    ) -> tuple[AlertRule | None, list[str]]:
        """Store a new rule: (the rule, []), (None, missing channels), or (None, []) when
        its id is taken."""
        async with self._pool.acquire() as conn, conn.transaction():
            missing = await self._missing_channels(conn, project, location, rule.channels)
            if missing:
                return None, missing
            try:
                row = await conn.fetchrow(
                    """INSERT INTO rules (project, location, rule_id, rule, channels, enabled)
                       VALUES ($1, $2, $3, $4, $5, $6)
                       ON CONFLICT DO NOTHING RETURNING *""",
                    project,
                    location,
                    rule.rule_id,
                    _rule_body(rule),
                    rule.channels,
                    rule.enabled,
                )
            except asyncpg.UniqueViolationError:  # pragma: no cover - ON CONFLICT covers it
                row = None
            return (_rule(row) if row else None), []

    async def rule(self, project: str, location: str, rule_id: str) -> AlertRule | None:
        """One rule, or None."""
        row = await self._pool.fetchrow(
            "SELECT * FROM rules WHERE project = $1 AND location = $2 AND rule_id = $3",
            project,
            location,
            rule_id,
        )
        return _rule(row) if row else None

    async def rules(
        self, project: str, location: str, size: int | None = None, after: str | None = None
    ) -> list[AlertRule]:
        """Rules by id (every one without ``size``), after the id ``after``."""
        rows = await self._pool.fetch(
            """SELECT * FROM rules WHERE project = $1 AND location = $2
                   AND ($3::text IS NULL OR rule_id > $3)
               ORDER BY rule_id LIMIT $4""",
            project,
            location,
            after,
            size,
        )
        return [_rule(row) for row in rows]

    async def update_rule(
        self, project: str, location: str, rule: AlertRule
    ) -> tuple[AlertRule | None, list[str]]:
        """Replace a rule: (the rule, []), (None, missing channels) or (None, []) when gone."""
        async with self._pool.acquire() as conn, conn.transaction():
            missing = await self._missing_channels(conn, project, location, rule.channels)
            if missing:
                return None, missing
            row = await conn.fetchrow(
                """UPDATE rules SET rule = $4, channels = $5, enabled = $6, update_time = now()
                   WHERE project = $1 AND location = $2 AND rule_id = $3 RETURNING *""",
                project,
                location,
                rule.rule_id,
                _rule_body(rule),
                rule.channels,
                rule.enabled,
            )
            return (_rule(row) if row else None), []

    async def delete_rule(self, project: str, location: str, rule_id: str) -> bool:
        """Delete a rule; whether it was there."""
        status = await self._pool.execute(
            "DELETE FROM rules WHERE project = $1 AND location = $2 AND rule_id = $3",
            project,
            location,
            rule_id,
        )
        return str(status).endswith(" 1")

    # --- analyses ---

    async def save_analysis(
        self,
        event_id: uuid.UUID,
        top_cause: TopCause | None,
        time_lost_seconds: float,
        create_time: datetime,
    ) -> int:
        """Keep an event's latest top cause (a re-analysis replaces it; an older analysis
        redelivered late does not); make its waiting OPENED deliveries due now. Returns how
        many were waiting."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._lock_event(conn, event_id)
            await conn.execute(
                """INSERT INTO analyses (event_id, top_cause, time_lost_seconds, create_time)
                   VALUES ($1, $2, $3, $4)
                   ON CONFLICT (event_id) DO UPDATE SET top_cause = EXCLUDED.top_cause,
                       time_lost_seconds = EXCLUDED.time_lost_seconds,
                       create_time = EXCLUDED.create_time
                   WHERE analyses.create_time <= EXCLUDED.create_time""",
                event_id,
                top_cause.model_dump_json() if top_cause else None,
                time_lost_seconds,
                create_time,
            )
            status = await conn.execute(
                """UPDATE deliveries SET next_attempt_time = now()
                   WHERE event_id = $1 AND kind = 'OPENED' AND state = 'PENDING'
                       AND attempts = 0 AND next_attempt_time > now()""",
                event_id,
            )
        return int(str(status).rsplit(" ", 1)[-1])

    async def analysis(self, event_id: uuid.UUID) -> tuple[TopCause | None, float] | None:
        """An event's top cause and time lost, None before its analysis came."""
        row = await self._pool.fetchrow(
            "SELECT top_cause, time_lost_seconds FROM analyses WHERE event_id = $1", event_id
        )
        if row is None:
            return None
        cause = TopCause.model_validate_json(row["top_cause"]) if row["top_cause"] else None
        return cause, float(row["time_lost_seconds"])

    # --- deciding deliveries ---

    async def decide_opened(
        self, run: RunFacts, event: WorkloadEvent, plans: Sequence[Plan], wait_seconds: float
    ) -> int:
        """Store the OPENED delivery of every plan (PENDING, SUPPRESSED as grouped or rate
        limited); a plan decided before is left alone. Returns how many were queued."""
        queued = 0
        snapshot = event.model_dump_json()
        async with self._pool.acquire() as conn, conn.transaction():
            await self._lock_event(conn, event.event_id)
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
    async def _lock_event(conn: asyncpg.Connection, event_id: uuid.UUID) -> None:
        """Serialise an event's decision and its analysis: the analysis arriving in the same
        instant either is seen by the decision (no wait) or sees its deliveries (releases
        them), never neither."""
        key = f"notifier:event:{event_id}"
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)

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
