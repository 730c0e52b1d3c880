-- The runs the rules match on (a read model of run facts): project, run set, labels.
CREATE TABLE runs (
    run_id text PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    name text NOT NULL,
    display_name text NOT NULL DEFAULT '',
    run_set text NOT NULL DEFAULT '',
    labels jsonb NOT NULL DEFAULT '{}',
    deleted boolean NOT NULL DEFAULT false,
    update_time timestamptz NOT NULL
);

CREATE TABLE channels (
    project text NOT NULL,
    location text NOT NULL,
    channel_id text NOT NULL,
    display_name text NOT NULL,
    kind text NOT NULL,
    config jsonb NOT NULL DEFAULT '{}',
    -- Fernet token of the JSON object of secrets: never stored or returned in the clear.
    secrets bytea NOT NULL,
    secret_keys text[] NOT NULL DEFAULT '{}',
    enabled boolean NOT NULL DEFAULT true,
    create_time timestamptz NOT NULL DEFAULT now(),
    update_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, location, channel_id)
);

CREATE TABLE rules (
    project text NOT NULL,
    location text NOT NULL,
    rule_id text NOT NULL,
    rule jsonb NOT NULL,
    channels text[] NOT NULL,
    enabled boolean NOT NULL DEFAULT true,
    create_time timestamptz NOT NULL DEFAULT now(),
    update_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, location, rule_id)
);
CREATE INDEX rules_channels ON rules USING gin (channels);

-- The top cause of each analysed event (what an OPENED notification waits a moment for).
CREATE TABLE analyses (
    event_id uuid PRIMARY KEY,
    top_cause jsonb,
    time_lost_seconds double precision NOT NULL DEFAULT 0,
    create_time timestamptz NOT NULL DEFAULT now()
);

-- One notification to one channel: the id is derived from (event, kind, rule, channel), so a
-- redelivered event or a second replica inserts nothing new.
CREATE TABLE deliveries (
    delivery_id uuid PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    channel text NOT NULL,
    rule text NOT NULL DEFAULT '',
    kind text NOT NULL,
    run_id text NOT NULL DEFAULT '',
    event_id uuid,
    -- The event as it came, in text: its evidence may hold NaN, which jsonb refuses.
    event text,
    state text NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    last_error text NOT NULL DEFAULT '',
    -- A grouped notification (one per window) lists the deliveries folded into it.
    is_group boolean NOT NULL DEFAULT false,
    grouped_into uuid,
    create_time timestamptz NOT NULL DEFAULT now(),
    next_attempt_time timestamptz,
    deliver_time timestamptz
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_time)
    WHERE state IN ('PENDING', 'RETRYING');
CREATE INDEX deliveries_recent ON deliveries (project, location, rule, channel, create_time);
CREATE INDEX deliveries_event ON deliveries (event_id);
CREATE INDEX deliveries_grouped ON deliveries (grouped_into) WHERE grouped_into IS NOT NULL;
CREATE INDEX deliveries_listed ON deliveries (project, location, create_time DESC, delivery_id);
