-- The model registry: models, their versions, the aliases naming versions, and the done
-- operations uploads and deletes answered (the SDK may read one again). Metadata only: a
-- version's files stay in object storage at its artifact_uri.
CREATE TABLE models (
    project text NOT NULL,
    location text NOT NULL,
    model_id text NOT NULL,
    display_name text NOT NULL,
    description text NOT NULL DEFAULT '',
    -- The highest version id ever given: ids are never reused, even after a delete.
    last_version integer NOT NULL,
    create_time timestamptz NOT NULL,
    update_time timestamptz NOT NULL,
    PRIMARY KEY (project, location, model_id)
);
CREATE INDEX models_by_parent_newest ON models (project, location, create_time DESC, model_id DESC);

CREATE TABLE model_versions (
    project text NOT NULL,
    location text NOT NULL,
    model_id text NOT NULL,
    version_id integer NOT NULL,
    version_description text NOT NULL DEFAULT '',
    labels jsonb NOT NULL DEFAULT '{}'::jsonb,
    artifact_uri text NOT NULL,
    -- The rest of the version as the API serves it (containerSpec, metadata, ...): JSON.
    body jsonb NOT NULL,
    -- What produced it (ModelLineage JSON), NULL for an upload through the API.
    lineage jsonb,
    -- A training pipeline's import carries the pipeline's name: importing twice answers the
    -- version already there. '' for uploads.
    idempotency_key text NOT NULL DEFAULT '',
    -- Bumped on every change; the etag is derived from it.
    revision integer NOT NULL DEFAULT 1,
    create_time timestamptz NOT NULL,
    update_time timestamptz NOT NULL,
    PRIMARY KEY (project, location, model_id, version_id),
    FOREIGN KEY (project, location, model_id) REFERENCES models ON DELETE CASCADE
);
CREATE UNIQUE INDEX model_versions_idempotency ON model_versions (idempotency_key)
    WHERE idempotency_key <> '';

-- One row per alias: an alias names at most one version of its model. `default` is an
-- alias like the others, held by exactly one version of every model.
CREATE TABLE model_aliases (
    project text NOT NULL,
    location text NOT NULL,
    model_id text NOT NULL,
    alias text NOT NULL,
    version_id integer NOT NULL,
    PRIMARY KEY (project, location, model_id, alias),
    FOREIGN KEY (project, location, model_id, version_id) REFERENCES model_versions
        ON DELETE CASCADE
);
CREATE INDEX model_aliases_by_version ON model_aliases (project, location, model_id, version_id);

-- The done operations of uploads and deletes, answered again by GET .../operations/{op}.
-- Kept after their model is deleted (no foreign key).
CREATE TABLE model_operations (
    project text NOT NULL,
    location text NOT NULL,
    model_id text NOT NULL,
    operation_id text NOT NULL,
    body jsonb NOT NULL,
    create_time timestamptz NOT NULL,
    PRIMARY KEY (project, location, model_id, operation_id)
);
