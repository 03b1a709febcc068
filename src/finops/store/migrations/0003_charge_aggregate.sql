-- Exact helpers of the set-based charge run (finops.store.charge_sql).
--
-- finops_half_even(num, den): num / den rounded once to a whole number, half to even, for
-- num >= 0 and den > 0; numeric div/mod are exact, so no decimal rounding happens first.
CREATE FUNCTION finops_half_even(num numeric, den numeric) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT div(num, den) + CASE
            WHEN 2 * mod(num, den) > den THEN 1
            WHEN 2 * mod(num, den) = den AND mod(div(num, den), 2) = 1 THEN 1
            ELSE 0 END
    $$;

-- finops_fraction_sum(ys, ls): sum(ys[i] / ls[i]) as an exact (numerator, denominator) pair;
-- used only for the few rows a Subscription's active interval trims (their shares are not
-- finite decimals). An empty or NULL list is 0/1.
CREATE FUNCTION finops_fraction_sum(ys numeric[], ls numeric[], OUT n numeric, OUT d numeric)
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
    BEGIN
        n := 0;
        d := 1;
        FOR i IN 1 .. coalesce(array_length(ys, 1), 0) LOOP
            n := n * ls[i] + ys[i] * d;
            d := d * ls[i];
        END LOOP;
    END
    $$;
