"""Pure decisions of the collection runs: which hours to fetch, what the CostJob records."""
