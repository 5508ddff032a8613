-- The event log, its head, and snapshots of folded state.

-- payload is bytea, not jsonb: the store never looks inside, and replay wants the
-- envelope's bytes back as fast as possible (no jsonb -> text rendering).
CREATE TABLE events (
    position       bigint      PRIMARY KEY,
    id             text        NOT NULL,
    type           text        NOT NULL,
    stream         text        NOT NULL,
    stream_version bigint      NOT NULL,
    time           timestamptz,
    recorded_at    timestamptz NOT NULL,
    payload        bytea       NOT NULL,
    CONSTRAINT events_id_key UNIQUE (id),
    CONSTRAINT events_stream_version_key UNIQUE (stream, stream_version),
    CONSTRAINT events_position_positive CHECK (position > 0),
    CONSTRAINT events_stream_version_positive CHECK (stream_version > 0)
);

-- position_at(): the last position recorded at or before a time.
CREATE INDEX events_recorded_at_idx ON events (recorded_at, position);

-- One row. Appenders lock it for the whole append transaction: that serializes
-- them, so positions are gap-free and commit order == position order (a sequence
-- would give gaps on rollback and let N+1 commit before N).
CREATE TABLE log_head (
    one         boolean     PRIMARY KEY DEFAULT true CHECK (one),
    position    bigint      NOT NULL,
    recorded_at timestamptz NOT NULL  -- last recorded_at handed out: keeps it monotonic
);
INSERT INTO log_head (one, position, recorded_at) VALUES (true, 0, '1970-01-01 00:00:00+00');

CREATE TABLE snapshots (
    name       text        NOT NULL,
    position   bigint      NOT NULL CHECK (position >= 0),
    data       bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (name, position)
);

-- lz4 instead of pglz for values large enough to be compressed (big envelopes,
-- snapshots of folded state): several times faster to decompress on replay and
-- restart. Skipped where the server lacks lz4 (or predates PostgreSQL 14).
DO $$
BEGIN
    EXECUTE 'ALTER TABLE events ALTER COLUMN payload SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE snapshots ALTER COLUMN data SET COMPRESSION lz4';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'esched: lz4 compression not available (%), keeping the default', SQLERRM;
END
$$;
