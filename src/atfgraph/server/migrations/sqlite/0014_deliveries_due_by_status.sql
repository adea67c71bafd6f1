-- The notifier's due deliveries through the index made for them. SQLite, without statistics,
-- preferred atfg_deliveries_by_status (status, created_at) to the partial atfg_deliveries_due
-- (next_at) for `status = 'pending' AND next_at <= ? ORDER BY next_at`: every pass (twice a
-- second) read every pending delivery and sorted them. Keyed (status, next_at), the index serves
-- the equality and the range together and gives the order (PostgreSQL already used it).
DROP INDEX atfg_deliveries_due;
CREATE INDEX atfg_deliveries_due ON atfg_deliveries (status, next_at) WHERE status = 'pending';
