"""Pricing decisions: which PriceBook is active and what OpenCost is told."""
