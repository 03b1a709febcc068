"""Tier 2: the ledger against a real PostgreSQL."""
