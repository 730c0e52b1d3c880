-- Captures still pending, oldest first: what the capture deadline sweeper reads every few
-- seconds, without scanning every operation the registry ever answered.
CREATE INDEX operations_pending_captures ON operations (create_time)
    WHERE verb = 'capture' AND NOT done;
