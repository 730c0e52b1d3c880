-- API tokens. Only the SHA-256 of a secret is kept (see mldiag_platform.auth for why that is
-- enough); the prefix is shown so people can tell their tokens apart.
CREATE TABLE api_tokens (
    token_id text PRIMARY KEY,
    secret_hash text NOT NULL UNIQUE,
    secret_prefix text NOT NULL,
    display_name text NOT NULL,
    role text NOT NULL,
    create_time timestamptz NOT NULL,
    expire_time timestamptz,
    revoke_time timestamptz
);
