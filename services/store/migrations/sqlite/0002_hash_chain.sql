-- The hash chain (services/store/chain.py): each event's hash over the one before,
-- and the head's hash beside the head position. Rows stored before this migration
-- are chained by `migrate` in the same transaction (SqliteEventStore).
ALTER TABLE events ADD COLUMN hash BLOB;
ALTER TABLE log_head ADD COLUMN hash BLOB;
