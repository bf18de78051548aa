-- Hostping inventory: every PCI function a host agent found under /sys/bus/pci/devices
-- (`pci_function.v1` on the compacted `hosts.inventory` topic). An agent publishes its whole set
-- at start, so the table is a history of inventories; ReplacingMergeTree(upload_ns) keeps the
-- newest row per (host, bdf) after merges (query with FINAL for the current inventory).
-- Queries: "which functions does host H have, which run below their maximum link" -> ORDER BY host, bdf.
CREATE TABLE IF NOT EXISTS pci_functions
(
    agent_id                 LowCardinality(String),
    upload_ns                Int64,
    host                     LowCardinality(String),
    bdf                      String,
    class_code               LowCardinality(String),
    kind                     LowCardinality(String),
    vendor_id                LowCardinality(String),
    device_id                LowCardinality(String),
    driver                   LowCardinality(String),
    numa_node                Int32,
    parent_bdf               String,
    path_to_root             String,
    current_link_speed_gtps  Nullable(Float64),
    current_link_width       Nullable(Int32),
    max_link_speed_gtps      Nullable(Float64),
    max_link_width           Nullable(Int32),
    netdevs                  String,
    rdma_devices             String,
    aer                      Bool,
    seen                     DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(upload_ns)
)
ENGINE = ReplacingMergeTree(upload_ns)
ORDER BY (host, bdf)
TTL toDateTime(seen) + INTERVAL 2 YEAR
SETTINGS non_replicated_deduplication_window = 1000;
