"""The FinOps gateway: a tenant-scoped, read-only HTTP API over the charge ledger."""
