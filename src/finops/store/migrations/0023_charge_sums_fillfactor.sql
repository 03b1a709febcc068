-- Free room in the pages of the charge sums (migration 0021), so that the charge run's
-- updates of them stay on their page.
--
-- Every hourly charge run updates the sums of each charged Subscription twice: the open hour
-- it promotes to final and the new hour it writes each add to the same day's and month's sum.
-- On a full page an update writes the new row version elsewhere and a new entry in the
-- primary key for it; with room on the page it is a heap-only update and the index is left
-- alone. Pruning frees the dead versions for the next run. A month's sum is rewritten twice an
-- hour for a whole month and the table is small (one row per Subscription version, source
-- and month): room for two new versions per row. A day's sum is rewritten for one day only
-- and the table is 24 times smaller than the ledger: room for one. Pages written from now on
-- keep this room; pages already full fill up as they were.
ALTER TABLE charge_months SET (fillfactor = 30);
ALTER TABLE charge_days SET (fillfactor = 50);
ALTER TABLE charge_namespace_days SET (fillfactor = 50);
