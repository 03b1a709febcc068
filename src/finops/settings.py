"""Settings read from the environment, parsed once per process into typed objects."""
