"""Record schemas, topic names, the Kafka codec, the cluster inventory model and the ClickHouse DDL."""
