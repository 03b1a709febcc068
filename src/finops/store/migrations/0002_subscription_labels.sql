-- A Subscription version also carries the Subscription's own metadata.labels. Labels change
-- without a new generation, so they join the version key: a relabelled Subscription gets a
-- new row and each charge keeps the labels its Subscription had when it was priced (the
-- FOCUS export's Tags). Rows mirrored before this migration had no labels recorded: '{}'.
ALTER TABLE subscription_versions
    ADD COLUMN subscription_labels jsonb NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(subscription_labels) = 'object'),
    ADD COLUMN subscription_labels_digest text NOT NULL
        GENERATED ALWAYS AS (md5(subscription_labels::text)) STORED;

ALTER TABLE subscription_versions
    DROP CONSTRAINT subscription_versions_cluster_uid_generation_labels_digest_key,
    ADD CONSTRAINT subscription_versions_version_key
        UNIQUE (cluster, uid, generation, labels_digest, subscription_labels_digest);
