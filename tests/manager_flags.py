"""Every manager flag the public configuration and metrics references document, as data.

Source: `content/reference/configuration.md` ("Manager flags", including the controller-runtime
logging flags named under it) and `content/reference/metrics.md` of stakater/finops-docs.
Values are typical ones a user would put in `controllerManager.manager.args`; `{...}` fields
are filled in by the test (ports and certificate directories of its own).
"""

from __future__ import annotations

DOCUMENTED: tuple[tuple[str, str | None], ...] = (
    # (flag, value or None for a bare boolean flag)
    ("--mode", "controller"),
    ("--skipDBConnection", None),
    ("--metrics-bind-address", "{metrics_address}"),
    ("--metrics-secure", "true"),
    ("--health-probe-bind-address", "{probe_address}"),
    ("--leader-elect", None),
    ("--webhook-cert-path", "{webhook_certs}"),
    ("--webhook-cert-name", "tls.crt"),
    ("--webhook-cert-key", "tls.key"),
    ("--metrics-cert-path", "{metrics_certs}"),
    ("--metrics-cert-name", "tls.crt"),
    ("--metrics-cert-key", "tls.key"),
    ("--zap-devel", "false"),
    ("--zap-encoder", "json"),
    ("--zap-log-level", "debug"),
    ("--zap-stacktrace-level", "error"),
    ("--zap-time-encoding", "iso8601"),
)


def argv(**fields: str) -> list[str]:
    """The whole documented list as command-line arguments, `{...}` fields filled in."""
    out: list[str] = []
    for flag, value in DOCUMENTED:
        out.append(flag if value is None else f"{flag}={value.format(**fields)}")
    return out
