"""finops-operator: cost accounting for Kubernetes workloads (finops.stakater.com/v1alpha1)."""

__version__ = "0.1.0"
