-- The ledger: rates, collected allocations, charges and the versions that priced them.
-- Every primary or unique key is an idempotency key: replaying the same hour upserts the
-- same rows. Hours are stored as the start of a UTC hour; windows are half-open.

-- Rows of pricebooks and *_versions must never change once other rows point at them.
CREATE FUNCTION finops_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of % are immutable once written', TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

-- One row per (PriceBook identity, rates version). The rates version is a digest of the
-- currency and every rate, so an edit that changes a price adds a row and history keeps
-- the prices it was collected with.
CREATE TABLE pricebooks (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster                 text   NOT NULL,
    book_namespace          text   NOT NULL,
    book_name               text   NOT NULL,
    book_uid                text   NOT NULL,
    rates_digest            text   NOT NULL,
    book_generation         bigint NOT NULL DEFAULT 0,
    currency                text   NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    cpu_hour_micros         bigint NOT NULL DEFAULT 0 CHECK (cpu_hour_micros >= 0),
    spot_cpu_hour_micros    bigint NOT NULL DEFAULT 0 CHECK (spot_cpu_hour_micros >= 0),
    ram_gb_hour_micros      bigint NOT NULL DEFAULT 0 CHECK (ram_gb_hour_micros >= 0),
    spot_ram_gb_hour_micros bigint NOT NULL DEFAULT 0 CHECK (spot_ram_gb_hour_micros >= 0),
    pv_gb_hour_micros       bigint NOT NULL DEFAULT 0 CHECK (pv_gb_hour_micros >= 0),
    gpu_hour_micros         bigint NOT NULL DEFAULT 0 CHECK (gpu_hour_micros >= 0),
    network_gib_micros      bigint NOT NULL DEFAULT 0 CHECK (network_gib_micros >= 0),
    UNIQUE (cluster, book_namespace, book_name, book_uid, rates_digest)
);

CREATE TRIGGER pricebooks_immutable BEFORE UPDATE ON pricebooks
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_update();

-- One row per cluster, allocation, namespace, aggregation and hour, every OpenCost
-- quantity kept exact. The key starts with (cluster, hour) so hour-window reads use it.
CREATE TABLE provider_allocations (
    cluster                  text        NOT NULL,
    hour                     timestamptz NOT NULL
        CHECK (extract(epoch FROM hour) % 3600 = 0),
    namespace                text        NOT NULL,
    name                     text        NOT NULL,
    aggregation              text        NOT NULL,
    start_time               timestamptz NOT NULL,
    end_time                 timestamptz NOT NULL,
    minutes                  numeric     NOT NULL DEFAULT 0,
    controller_kind          text        NOT NULL DEFAULT '',
    controller_name          text        NOT NULL DEFAULT '',
    pod                      text        NOT NULL DEFAULT '',
    container                text        NOT NULL DEFAULT '',
    node                     text        NOT NULL DEFAULT '',
    labels                   jsonb       NOT NULL DEFAULT '{}',
    cpu_core_request_average numeric     NOT NULL DEFAULT 0,
    cpu_core_usage_average   numeric     NOT NULL DEFAULT 0,
    cpu_core_hours           numeric     NOT NULL DEFAULT 0,
    gpu_count                numeric     NOT NULL DEFAULT 0,
    gpu_hours                numeric     NOT NULL DEFAULT 0,
    gpu_usage_average        numeric     NOT NULL DEFAULT 0,
    ram_byte_request_average numeric     NOT NULL DEFAULT 0,
    ram_byte_usage_average   numeric     NOT NULL DEFAULT 0,
    ram_byte_hours           numeric     NOT NULL DEFAULT 0,
    pv_byte_hours            numeric     NOT NULL DEFAULT 0,
    network_transfer_bytes   numeric     NOT NULL DEFAULT 0,
    network_receive_bytes    numeric     NOT NULL DEFAULT 0,
    pricebook_id             bigint      NOT NULL REFERENCES pricebooks (id),
    currency                 text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    is_finalized             boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (cluster, hour, namespace, name, aggregation)
);

-- The allocation boundary (earliest hour with non-finalized rows) reads only this.
CREATE INDEX provider_allocations_open ON provider_allocations (cluster, hour)
    WHERE NOT is_finalized;

-- One row per observed Offering version. The spec is immutable, so the generation
-- identifies the version; resource_version records the first one seen.
CREATE TABLE offering_versions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster          text        NOT NULL,
    uid              text        NOT NULL,
    namespace        text        NOT NULL,
    name             text        NOT NULL,
    generation       bigint      NOT NULL,
    resource_version text        NOT NULL,
    spec             jsonb       NOT NULL,
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster, uid, generation)
);

CREATE INDEX offering_versions_by_name ON offering_versions (cluster, namespace, name);

CREATE TRIGGER offering_versions_immutable BEFORE UPDATE ON offering_versions
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_update();

-- One row per observed Subscription version: a new generation or new labels on its
-- namespace. The labels are part of the version so charges roll up per tenant as the
-- namespace was labelled when they were priced.
CREATE TABLE subscription_versions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster          text        NOT NULL,
    uid              text        NOT NULL,
    namespace        text        NOT NULL,
    name             text        NOT NULL,
    generation       bigint      NOT NULL,
    resource_version text        NOT NULL,
    spec             jsonb       NOT NULL,
    namespace_labels jsonb       NOT NULL DEFAULT '{}',
    labels_digest    text        NOT NULL GENERATED ALWAYS AS (md5(namespace_labels::text)) STORED,
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster, uid, generation, labels_digest)
);

CREATE INDEX subscription_versions_by_name ON subscription_versions (cluster, namespace, name);
CREATE INDEX subscription_versions_tenant
    ON subscription_versions ((namespace_labels ->> 'stakater.com/tenant'));

CREATE TRIGGER subscription_versions_immutable BEFORE UPDATE ON subscription_versions
    FOR EACH ROW EXECUTE FUNCTION finops_refuse_update();

-- One row per cluster, Subscription, hour and charge source (the fee or a usage meter).
-- currency is '' when nothing named one (a fee with no PriceBook in sight).
CREATE TABLE subscription_charges (
    cluster                 text        NOT NULL,
    subscription_uid        text        NOT NULL,
    hour                    timestamptz NOT NULL
        CHECK (extract(epoch FROM hour) % 3600 = 0),
    source                  text        NOT NULL CHECK (source IN (
        'subscription', 'cpuHour', 'gpuHour', 'ramGbHour', 'pvGbHour', 'networkGb')),
    quantity                numeric     NOT NULL CHECK (quantity >= 0),
    unit_price_micros       bigint      NOT NULL CHECK (unit_price_micros >= 0),
    amount_micros           bigint      NOT NULL CHECK (amount_micros >= 0),
    currency                text        NOT NULL CHECK (currency ~ '^([A-Z]{3})?$'),
    finalized               boolean     NOT NULL DEFAULT false,
    offering_version_id     bigint      NOT NULL REFERENCES offering_versions (id),
    subscription_version_id bigint      NOT NULL REFERENCES subscription_versions (id),
    PRIMARY KEY (cluster, subscription_uid, hour, source)
);

-- The watermark reads the first non-finalized hour of each Subscription from this.
CREATE INDEX subscription_charges_open ON subscription_charges (cluster, subscription_uid, hour)
    WHERE NOT finalized;
CREATE INDEX subscription_charges_by_version ON subscription_charges (subscription_version_id);
CREATE INDEX subscription_charges_by_offering ON subscription_charges (offering_version_id);
