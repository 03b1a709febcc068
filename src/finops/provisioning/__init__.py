"""Decisions for PriceBooks, CostJobs and the FinOpsProvider: pure functions of observed state."""
