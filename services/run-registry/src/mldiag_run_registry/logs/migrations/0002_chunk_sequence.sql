-- The order chunks were stored in, per table: a follower's cursor carries the highest it has
-- seen, so a chunk stored later with lines before the cursor (a host whose clock runs behind,
-- a batch held back) is still served to it once.
ALTER TABLE log_chunks ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE INDEX log_chunks_by_seq ON log_chunks (run_id, seq);
