"""The long-lived controller manager and its reconcilers."""
