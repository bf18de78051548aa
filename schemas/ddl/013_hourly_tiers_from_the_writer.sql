-- The store writer rolls each block's merged minute rows up into the hourly tiers itself and inserts
-- them under the block's deduplication token (sinks/probe_tiers.py, README "Exactly-once rows"). The
-- two views of 011 grouped and joined every minute row on insert: measured on one 480,000-probe block
-- of the profile fabric, 5.4-6.0 µs of the writer's CPU per probe with the views against 1.8 without
-- (BENCHMARKS.md section 4). The tables, their keys and ToRs from rnic_inventory at insert time stay
-- as they were; queries and saved queries read the same tables.
DROP VIEW IF EXISTS probes_1h_rnic_from_1m_mv;
DROP VIEW IF EXISTS probes_1h_tor_from_1m_mv;
