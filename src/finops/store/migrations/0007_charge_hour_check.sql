-- The charge ledger's hour check, cheaper: `extract(epoch FROM hour) % 3600 = 0` built a
-- numeric and divided it for every charge row written (about 40 ms of a first charge run's
-- 187.5k rows at 2.5k Subscriptions); `date_bin` rounds the timestamp's integer microseconds
-- down to the hour and compares them (a few ms). Same values accepted: a finite timestamp
-- on a whole UTC hour (the origin, 2000-01-01 00:00 UTC, is on the epoch's hour grid);
-- ±infinity refused, as before (extract gave ±Infinity, whose remainder is NaN). Only
-- within about 30 years of the largest timestamp (294276 AD) did extract fall back to float
-- arithmetic and accept some instants off the hour; they are refused now. Same constraint
-- name, same SQLSTATE (23514).
ALTER TABLE subscription_charges
    DROP CONSTRAINT subscription_charges_hour_check,
    ADD CONSTRAINT subscription_charges_hour_check CHECK (
        isfinite(hour) AND date_bin('1 hour', hour, TIMESTAMPTZ '2000-01-01 00:00:00+00') = hour);
