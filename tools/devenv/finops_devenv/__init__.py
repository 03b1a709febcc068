"""Development tools of finops-operator (not shipped with the product): the local sandbox, a
real control plane and node, a throw-away PostgreSQL and the OpenCost replay server."""
