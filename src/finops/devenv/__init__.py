"""Local development services: throw-away PostgreSQL, control plane, OpenCost replay."""
