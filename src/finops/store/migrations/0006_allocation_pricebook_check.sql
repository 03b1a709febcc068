-- An allocation run merges each hour's rows (tens of thousands) in one statement. The
-- foreign key to pricebooks checked each row on its own (an index probe through SPI per
-- row, about a quarter of the merge); here each writing statement checks the distinct
-- pricebook ids it wrote at once (a merge writes one), against the same table, before the
-- statement ends, and fails with the same SQLSTATE (23503) as the foreign key did.
--
-- The foreign key also kept a referenced pricebook from being deleted; pricebook rows are
-- the rates allocations were collected with (updates were already refused) and nothing
-- deletes them, so deleting one is refused outright, and TRUNCATE of pricebooks is refused
-- unless the allocations go with it. With no delete possible, a pricebook seen by the check
-- stays there: the check needs no row lock. (finops_refuse_delete comes from 0005.)

CREATE FUNCTION finops_check_allocation_pricebooks() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT n.id INTO missing
    FROM (SELECT DISTINCT pricebook_id AS id FROM written) n
    WHERE NOT EXISTS (SELECT 1 FROM pricebooks p WHERE p.id = n.id)
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'an allocation row references a pricebook that is not stored '
            '(pricebook_id=%)', missing
            USING ERRCODE = 'foreign_key_violation', TABLE = 'provider_allocations';
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION finops_truncate_with_allocations() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM provider_allocations) THEN
        RAISE EXCEPTION 'truncating % would orphan allocation rows; truncate '
            'provider_allocations in the same statement', TG_TABLE_NAME
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER provider_allocations_pricebooks_inserted AFTER INSERT ON provider_allocations
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION finops_check_allocation_pricebooks();
CREATE TRIGGER provider_allocations_pricebooks_updated AFTER UPDATE ON provider_allocations
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION finops_check_allocation_pricebooks();

CREATE TRIGGER pricebooks_kept BEFORE DELETE ON pricebooks
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_delete();
CREATE TRIGGER pricebooks_truncated AFTER TRUNCATE ON pricebooks
    FOR EACH STATEMENT EXECUTE FUNCTION finops_truncate_with_allocations();

-- Every existing row passed the foreign key, so dropping it loses nothing.
ALTER TABLE provider_allocations DROP CONSTRAINT provider_allocations_pricebook_id_fkey;
