"""Everything that talks to the Kubernetes API lives in this package."""
