-- Where a verdict or coverage row came from: production, lab, sim or demo. A demo or simulator run beside
-- the lab lands in the same store; saved queries, `blame` and the live feed show one origin at a time (the
-- running pipeline's) unless asked for all. Rows stored before this column existed read as production.
ALTER TABLE verdicts ADD COLUMN IF NOT EXISTS origin LowCardinality(String) DEFAULT 'production';
ALTER TABLE coverage ADD COLUMN IF NOT EXISTS origin LowCardinality(String) DEFAULT 'production';
