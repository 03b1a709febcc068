"""OpenCost edge: the only code that talks HTTP to OpenCost's allocation API."""
