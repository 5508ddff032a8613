-- The event log, its head, and snapshots of folded state.
-- Times are integer microseconds since the Unix epoch (UTC): exact and comparable.

-- position is the rowid alias: reads by position range walk the table b-tree.
CREATE TABLE events (
    position       INTEGER PRIMARY KEY CHECK (position > 0),
    id             TEXT    NOT NULL UNIQUE,
    type           TEXT    NOT NULL,
    stream         TEXT    NOT NULL,
    stream_version INTEGER NOT NULL CHECK (stream_version > 0),
    time           INTEGER,
    recorded_at    INTEGER NOT NULL,
    payload        BLOB    NOT NULL,
    UNIQUE (stream, stream_version)
);

CREATE INDEX events_recorded_at_idx ON events (recorded_at, position);

-- One row; appends run under BEGIN IMMEDIATE (one writer at a time), and keep
-- the head and the last recorded_at here, as the PostgreSQL schema does.
CREATE TABLE log_head (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    position    INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL
);
INSERT INTO log_head (one, position, recorded_at) VALUES (1, 0, 0);

CREATE TABLE snapshots (
    name       TEXT    NOT NULL,
    position   INTEGER NOT NULL CHECK (position >= 0),
    data       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (name, position)
);
