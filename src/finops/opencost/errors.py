"""Why an OpenCost query failed, as exception types the collection run can report verbatim.

Every failure is an `OpenCostError`, so the run can catch one type, record `str(exc)` in the
CostJob's execution record and roll the hour back.
"""

from __future__ import annotations


class OpenCostError(Exception):
    """Any failure to get one hour of allocations out of OpenCost."""


class OpenCostHTTPError(OpenCostError):
    """OpenCost answered with an error status (plain-text 400s, JSON 500s with `message`)."""

    def __init__(self, status: int, message: str, *, query: str = "") -> None:
        self.status = status
        self.message = message
        self.query = query
        where = f" to {query}" if query else ""
        super().__init__(f"OpenCost answered HTTP {status}{where}: {message}")


class OpenCostResponseError(OpenCostError):
    """OpenCost answered 200 but the body is not the allocation JSON we understand."""

    def __init__(self, message: str, *, query: str = "") -> None:
        self.message = message
        self.query = query
        where = f" to {query}" if query else ""
        super().__init__(f"OpenCost sent a malformed response{where}: {message}")


class OpenCostTimeoutError(OpenCostError):
    """OpenCost did not answer within the CostJob's `openCostFetchTimeout`."""


class OpenCostUnavailableError(OpenCostError):
    """OpenCost could not be reached at all (connection refused, DNS, reset)."""
