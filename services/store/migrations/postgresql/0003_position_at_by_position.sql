-- position_at() binary-searches recorded_at through the primary key; no index of its own.
--
-- recorded_at never decreases with position (each append takes
-- max(clock, log_head.recorded_at), see postgres.py), so the last position
-- recorded at or before a time is found with about log2(head) primary-key
-- lookups (20 for a million events). events_recorded_at_idx served only that
-- rare query, yet every append paid for it: without it an append costs about 15%
-- less server time (2026-11-23).
DROP INDEX IF EXISTS events_recorded_at_idx;

-- STABLE: the head and the rows it reads come from one snapshot, and positions
-- 1..head are gap-free in it, so every probe finds its row.
CREATE FUNCTION esched_position_at(t timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
    lo  bigint := 0;  -- recorded at or before t (0: before every event)
    hi  bigint;       -- every position above hi was recorded after t
    mid bigint;
    at  timestamptz;
BEGIN
    SELECT position INTO hi FROM log_head WHERE one;
    WHILE lo < hi LOOP
        mid := lo + (hi - lo + 1) / 2;
        SELECT recorded_at INTO at FROM events WHERE position = mid;
        IF at <= t THEN
            lo := mid;
        ELSE
            hi := mid - 1;
        END IF;
    END LOOP;
    RETURN lo;
END
$$;
