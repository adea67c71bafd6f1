-- A step's place in its run's path and what it ran, for runs whose steps are recorded by a
-- remote worker (an atfgraph traverser's child steps, app.traverse): seq orders them, target
-- names the node.skill. NULL for pyworkflow's own steps, whose order is their events'.
ALTER TABLE steps ADD COLUMN seq INTEGER;
ALTER TABLE steps ADD COLUMN target TEXT;
