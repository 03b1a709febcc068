"""The ledger in PostgreSQL: migrations and the only SQL in the package.

`pool` connects (from `POSTGRES_CONNECTION_STRING`), `migrate` applies the numbered files in
`migrations/`, `allocations`, `charges` and `mirror` read and write the tables. Functions
take a `psycopg.Connection` so the caller decides what commits together.
"""
