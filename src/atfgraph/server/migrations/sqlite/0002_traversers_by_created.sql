-- The console's Runs page without a status filter lists traversers newest first: an index on
-- creation time keeps it an index walk bounded by its LIMIT instead of a sort of the whole table.
CREATE INDEX atfg_traversers_by_created ON atfg_traversers (created_at);
