-- The allocation ledger's hour check, cheaper, as 0007 did for the charge ledger:
-- `extract(epoch FROM hour) % 3600 = 0` built a numeric and divided it for every allocation
-- row written (an hour's merge writes tens of thousands); `date_bin` rounds the timestamp's
-- integer microseconds down to the hour and compares them. Same values accepted: a finite
-- timestamp on a whole UTC hour (the origin, 2000-01-01 00:00 UTC, is on the epoch's hour
-- grid); ±infinity refused, as before. Only within about 30 years of the largest timestamp
-- (294276 AD) did extract fall back to float arithmetic and accept some instants off the
-- hour; they are refused now. Same constraint name, same SQLSTATE (23514). This was the last
-- check in the numeric form: start_time and end_time carry no check.
ALTER TABLE provider_allocations
    DROP CONSTRAINT provider_allocations_hour_check,
    ADD CONSTRAINT provider_allocations_hour_check CHECK (
        isfinite(hour) AND date_bin('1 hour', hour, TIMESTAMPTZ '2000-01-01 00:00:00+00') = hour);
