-- Billing periods that close, and corrections of closed ones.
--
-- A closed period's rows never change again: the triggers below refuse any insert, update
-- or delete of a charge row in an hour before the end of the last closed period, and any
-- truncation once a period is closed. Periods close in order, one after the other, and only
-- when no charge row in them is still open. Whatever later changes for a closed hour is
-- booked in `charge_corrections`, in the first period still open.

-- What a charge row was priced from beyond its amount: the PriceBook rates of a usage row's
-- hour, and the service period a fee row's ticks pay for. Rows written before this migration
-- have neither (NULL).
ALTER TABLE subscription_charges
    ADD COLUMN pricebook_id bigint,
    ADD COLUMN covers_start timestamptz,
    ADD COLUMN covers_end   timestamptz,
    ADD CONSTRAINT subscription_charges_covers_check CHECK (
        (covers_start IS NULL) = (covers_end IS NULL) AND covers_start < covers_end);

-- The calendar the charge run closes periods by (readers use it for open periods), and the
-- hour before which usage charge rows may be final (charge runs only ever move it forward).
CREATE TABLE billing_calendars (
    cluster            text        PRIMARY KEY,
    time_zone          text        NOT NULL,
    grace_hours        integer     NOT NULL CHECK (grace_hours >= 0),
    usage_final_before timestamptz
);

-- One row per closed period. Never updated or deleted.
CREATE TABLE billing_periods (
    cluster       text        NOT NULL,
    period_start  timestamptz NOT NULL,
    period_end    timestamptz NOT NULL,
    label         text        NOT NULL,
    time_zone     text        NOT NULL,
    closed_by_run timestamptz NOT NULL,
    closed_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, period_start),
    UNIQUE (cluster, period_end),
    CHECK (period_end > period_start),
    CHECK (date_bin('1 hour', period_start, TIMESTAMPTZ '2000-01-01 00:00:00+00') = period_start),
    CHECK (date_bin('1 hour', period_end, TIMESTAMPTZ '2000-01-01 00:00:00+00') = period_end)
);

-- The end of the cluster's last closed period; NULL when none is closed.
CREATE FUNCTION finops_closed_through(c text) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT max(period_end) FROM billing_periods WHERE cluster = c $$;

-- A period closes right after the last closed one (or first, anywhere), and only when every
-- charge row before its end is final.
CREATE FUNCTION finops_check_period_close() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last timestamptz := finops_closed_through(NEW.cluster);
    open_hour timestamptz;
BEGIN
    IF last IS NOT NULL AND NEW.period_start <> last THEN
        RAISE EXCEPTION 'billing period % of cluster % cannot close: the next period to close '
            'starts at %', NEW.period_start, NEW.cluster, last
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    SELECT min(hour) INTO open_hour FROM subscription_charges
    WHERE cluster = NEW.cluster AND NOT finalized AND hour < NEW.period_end;
    IF open_hour IS NOT NULL THEN
        RAISE EXCEPTION 'billing period % of cluster % cannot close: the charges of % are not '
            'final', NEW.period_start, NEW.cluster, open_hour
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER billing_periods_close BEFORE INSERT ON billing_periods
    FOR EACH ROW EXECUTE FUNCTION finops_check_period_close();
CREATE TRIGGER billing_periods_immutable BEFORE UPDATE ON billing_periods
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_update();
CREATE TRIGGER billing_periods_kept BEFORE DELETE ON billing_periods
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_delete();

-- Refuse a statement that changed rows in closed hours. `changed` is the transition table
-- of the trigger (the new rows of an insert or update, the old rows of an update or delete).
CREATE FUNCTION finops_refuse_closed_hours() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM billing_periods) THEN
        RETURN NULL;
    END IF;
    SELECT w.cluster, w.first, p.closed INTO bad
    FROM (SELECT cluster, min(hour) AS first FROM changed GROUP BY cluster) w
    JOIN (SELECT cluster, max(period_end) AS closed FROM billing_periods GROUP BY cluster) p
      USING (cluster)
    WHERE w.first < p.closed
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'rows of % in hour % of cluster % belong to a closed billing period '
            '(closed through %); later changes are booked as corrections', TG_TABLE_NAME,
            bad.first, bad.cluster, bad.closed
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION finops_refuse_truncate_closed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM billing_periods) THEN
        RAISE EXCEPTION 'truncating % would change closed billing periods', TG_TABLE_NAME
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER subscription_charges_closed_inserted AFTER INSERT ON subscription_charges
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
CREATE TRIGGER subscription_charges_closed_updated AFTER UPDATE ON subscription_charges
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
CREATE TRIGGER subscription_charges_closed_replaced AFTER UPDATE ON subscription_charges
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
CREATE TRIGGER subscription_charges_closed_deleted AFTER DELETE ON subscription_charges
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
CREATE TRIGGER subscription_charges_closed_truncated BEFORE TRUNCATE ON subscription_charges
    FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_truncate_closed();
CREATE TRIGGER billing_periods_truncated BEFORE TRUNCATE ON billing_periods
    FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_truncate_closed();

-- A correction: what a later run found a closed hour should have been charged, booked in
-- the first open period. Amounts and quantities are signed: a row reverses (negative) or
-- adds (positive) one part of the hour's charge, so for every (Subscription, hour, source)
-- the charge row plus its corrections equals the hour recomputed. Never updated or deleted.
CREATE TABLE charge_corrections (
    id                      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster                 text        NOT NULL,
    booked_in               timestamptz NOT NULL,
    booked_by_run           timestamptz NOT NULL,
    corrects_period         timestamptz NOT NULL,
    subscription_uid        text        NOT NULL,
    hour                    timestamptz NOT NULL
        CHECK (date_bin('1 hour', hour, TIMESTAMPTZ '2000-01-01 00:00:00+00') = hour),
    source                  text        NOT NULL CHECK (source IN (
        'subscription', 'cpuHour', 'gpuHour', 'ramGbHour', 'pvGbHour', 'networkGb')),
    quantity                numeric     NOT NULL,
    unit_price_micros       bigint      NOT NULL CHECK (unit_price_micros >= 0),
    amount_micros           bigint      NOT NULL,
    currency                text        NOT NULL CHECK (currency ~ '^([A-Z]{3})?$'),
    pricebook_id            bigint,
    covers_start            timestamptz,
    covers_end              timestamptz,
    offering_version_id     bigint      NOT NULL,
    subscription_version_id bigint      NOT NULL,
    CHECK (corrects_period <= hour AND hour < booked_in),
    CHECK ((covers_start IS NULL) = (covers_end IS NULL) AND covers_start < covers_end)
);

CREATE INDEX charge_corrections_booked ON charge_corrections (cluster, booked_in);
CREATE INDEX charge_corrections_by_hour ON charge_corrections (cluster, subscription_uid, hour);

-- Corrections are booked in the first open period, for hours of closed ones.
CREATE FUNCTION finops_check_correction() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last timestamptz := finops_closed_through(NEW.cluster);
BEGIN
    IF last IS NULL OR NEW.booked_in <> last OR NEW.hour >= last THEN
        RAISE EXCEPTION 'a correction of hour % must be booked in the first open billing '
            'period of cluster % (which starts at %) and correct a closed hour', NEW.hour,
            NEW.cluster, last
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER charge_corrections_booked BEFORE INSERT ON charge_corrections
    FOR EACH ROW EXECUTE FUNCTION finops_check_correction();
CREATE TRIGGER charge_corrections_immutable BEFORE UPDATE ON charge_corrections
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_update();
CREATE TRIGGER charge_corrections_kept BEFORE DELETE ON charge_corrections
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_delete();
CREATE TRIGGER charge_corrections_truncated BEFORE TRUNCATE ON charge_corrections
    FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_truncate_closed();

-- Hours whose allocation rows changed, for the charge run to recheck once they are closed.
CREATE TABLE allocation_changes (
    cluster text        NOT NULL,
    hour    timestamptz NOT NULL,
    PRIMARY KEY (cluster, hour)
);

CREATE FUNCTION finops_note_allocation_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO allocation_changes (cluster, hour)
    SELECT DISTINCT cluster, hour FROM changed
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;

CREATE TRIGGER provider_allocations_changes_inserted AFTER INSERT ON provider_allocations
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION finops_note_allocation_changes();
CREATE TRIGGER provider_allocations_changes_updated AFTER UPDATE ON provider_allocations
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION finops_note_allocation_changes();
CREATE TRIGGER provider_allocations_changes_deleted AFTER DELETE ON provider_allocations
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION finops_note_allocation_changes();

-- The terms each Subscription was last charged under, how far it was charged, and the hours
-- still to recheck once their period has closed (after a change of terms).
CREATE TABLE charge_terms (
    cluster             text        NOT NULL,
    subscription_uid    text        NOT NULL,
    activated_at        timestamptz NOT NULL,
    deactivated_at      timestamptz,
    offering_version_id bigint      NOT NULL,
    charged_through     timestamptz NOT NULL,
    recheck_from        timestamptz,
    recheck_to          timestamptz,
    PRIMARY KEY (cluster, subscription_uid),
    CHECK ((recheck_from IS NULL) = (recheck_to IS NULL) AND recheck_from < recheck_to)
);
