-- The hash chain (services/store/chain.py): each event's hash over the one before,
-- and the head's hash beside the head position. Rows stored before this migration
-- are chained by `migrate` right after it (PostgresEventStore._backfill_chain), in
-- one transaction holding the head lock, so appends wait for it.
ALTER TABLE events ADD COLUMN hash bytea;
ALTER TABLE log_head ADD COLUMN hash bytea;
