-- A charge run writes hundreds of thousands of charge rows in one statement. The two foreign
-- keys to the version tables checked each row on its own (two index probes through SPI per
-- row, about a third of a run's write); here each writing statement checks the distinct
-- version ids it wrote at once, against the same tables, before the statement ends, and
-- fails with the same SQLSTATE (23503) as the foreign key did.
--
-- A foreign key also kept a referenced version from being deleted; versions are history
-- that charges are priced under (updates were already refused), so deleting one is refused
-- outright, and TRUNCATE of a version table is refused unless the charges go with it. With
-- no delete possible, a version seen by the check stays there: the check needs no row lock.

CREATE FUNCTION finops_check_charge_versions() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    SELECT format('offering_version_id=%s', n.id) INTO missing
    FROM (SELECT DISTINCT offering_version_id AS id FROM written) n
    WHERE NOT EXISTS (SELECT 1 FROM offering_versions o WHERE o.id = n.id)
    LIMIT 1;
    IF missing IS NULL THEN
        SELECT format('subscription_version_id=%s', n.id) INTO missing
        FROM (SELECT DISTINCT subscription_version_id AS id FROM written) n
        WHERE NOT EXISTS (SELECT 1 FROM subscription_versions v WHERE v.id = n.id)
        LIMIT 1;
    END IF;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'a charge row references a version that is not mirrored (%)', missing
            USING ERRCODE = 'foreign_key_violation', TABLE = 'subscription_charges';
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION finops_refuse_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of % are history and are never deleted', TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE FUNCTION finops_truncate_with_charges() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM subscription_charges) THEN
        RAISE EXCEPTION 'truncating % would orphan charge rows; truncate subscription_charges '
            'in the same statement', TG_TABLE_NAME
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER subscription_charges_versions_inserted AFTER INSERT ON subscription_charges
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION finops_check_charge_versions();
CREATE TRIGGER subscription_charges_versions_updated AFTER UPDATE ON subscription_charges
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION finops_check_charge_versions();

CREATE TRIGGER offering_versions_kept BEFORE DELETE ON offering_versions
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_delete();
CREATE TRIGGER subscription_versions_kept BEFORE DELETE ON subscription_versions
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_delete();
CREATE TRIGGER offering_versions_truncated AFTER TRUNCATE ON offering_versions
    FOR EACH STATEMENT EXECUTE FUNCTION finops_truncate_with_charges();
CREATE TRIGGER subscription_versions_truncated AFTER TRUNCATE ON subscription_versions
    FOR EACH STATEMENT EXECUTE FUNCTION finops_truncate_with_charges();

-- Every existing row passed the foreign keys, so dropping them loses nothing.
ALTER TABLE subscription_charges
    DROP CONSTRAINT subscription_charges_offering_version_id_fkey,
    DROP CONSTRAINT subscription_charges_subscription_version_id_fkey;

-- This index served only the foreign key's check when an offering version was deleted,
-- which is now refused; nothing reads charges by offering version (the reads join from the
-- charge to its offering version by the version's primary key).
DROP INDEX subscription_charges_by_offering;
