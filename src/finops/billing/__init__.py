"""Billing core: exact, pure arithmetic from clocks and measured usage to money."""
