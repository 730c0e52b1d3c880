-- Share links. The token itself is never stored: it is signed with the key below, so the
-- row is only what a revocation, a listing and the audit need.
CREATE TABLE share_links (
    link_id text PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    resource text NOT NULL,
    kind text NOT NULL,
    run_id text NOT NULL,
    event_id uuid,
    session_id text,
    display_name text NOT NULL,
    created_by text NOT NULL,
    create_time timestamptz NOT NULL,
    expire_time timestamptz NOT NULL,
    revoke_time timestamptz
);
CREATE INDEX share_links_by_resource ON share_links (project, location, resource, create_time DESC);

-- The signing key, made by the first registry to start unless the operator sets one
-- (MLDIAG_RUN_REGISTRY_SHARE_LINK_KEY), so every replica signs and checks alike.
CREATE TABLE share_link_keys (
    key_id smallint PRIMARY KEY,
    secret bytea NOT NULL,
    create_time timestamptz NOT NULL DEFAULT now()
);
