"""The runtime control plane: RuntimeService over a persistent store, blobs and backends."""
