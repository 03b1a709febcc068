-- The gateway finds a namespace's charges through its Subscription versions, then wants one
-- window of hours of each (a month of costs by meter, one Subscription's rows, a namespace's
-- FOCUS export). Keyed on (version, hour), that window is one index range per version instead
-- of every row the version ever priced. The included columns are all the costs sums read, so
-- settled months (all-visible pages) are summed from the index alone without touching the
-- table. The single-column index is a prefix of the new one (the foreign key's lookups use
-- either), so it goes.
CREATE INDEX subscription_charges_by_version_hour
    ON subscription_charges (subscription_version_id, hour)
    INCLUDE (cluster, subscription_uid, source, currency, amount_micros, finalized);
DROP INDEX subscription_charges_by_version;
