-- Budgets, evaluated after each charge run. Two tables:
--
-- budget_thresholds is the durable record of every threshold a Budget's period reached: one
-- row per (Budget, period, basis, percent), written once. `event_posted` says the Kubernetes
-- Event about it was accepted (or found already there), so a replayed or restarted run never
-- posts it twice and a run killed between the two steps posts it on the next run.
--
-- budget_evaluations holds each Budget's latest evaluation: what the gateway and the
-- dashboard show without reading the Kubernetes API, and the Subscriptions counted in the
-- period so far (a Subscription stays counted for the period once it matched). Hours are
-- whole UTC hours, checked as migration 0007 checks charge hours.
CREATE TABLE budget_thresholds (
    cluster       text        NOT NULL,
    budget_uid    text        NOT NULL,
    period_start  timestamptz NOT NULL,
    basis         text        NOT NULL CHECK (basis IN ('Actual', 'Forecast')),
    percent       integer     NOT NULL CHECK (percent BETWEEN 1 AND 1000),
    crossed_at    timestamptz NOT NULL CHECK (
        isfinite(crossed_at)
        AND date_bin('1 hour', crossed_at, TIMESTAMPTZ '2000-01-01 00:00:00+00') = crossed_at),
    value_micros  bigint      NOT NULL CHECK (value_micros >= 0),
    amount_micros bigint      NOT NULL CHECK (amount_micros > 0),
    event_posted  boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (cluster, budget_uid, period_start, basis, percent)
);

CREATE TABLE budget_evaluations (
    cluster             text        NOT NULL,
    budget_uid          text        NOT NULL,
    namespace           text        NOT NULL,
    name                text        NOT NULL,
    generation          bigint      NOT NULL,
    period              text        NOT NULL CHECK (period IN ('Monthly', 'Weekly', 'Quarterly')),
    period_start        timestamptz NOT NULL,
    period_end          timestamptz NOT NULL CHECK (period_end > period_start),
    evaluated_hour      timestamptz NOT NULL CHECK (
        isfinite(evaluated_hour)
        AND date_bin('1 hour', evaluated_hour, TIMESTAMPTZ '2000-01-01 00:00:00+00')
            = evaluated_hour),
    currency            text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_micros       bigint      NOT NULL CHECK (amount_micros > 0),
    spent_micros        bigint      NOT NULL CHECK (spent_micros >= 0),
    future_fees_micros  bigint      NOT NULL CHECK (future_fees_micros >= 0),
    future_usage_micros bigint      NOT NULL CHECK (future_usage_micros >= 0),
    state               text        NOT NULL,
    members             text[]      NOT NULL DEFAULT '{}',
    PRIMARY KEY (cluster, budget_uid)
);

CREATE INDEX budget_evaluations_by_namespace ON budget_evaluations (cluster, namespace, name);
