"""The Stack reconciler: validation, sources, Automation API calls, error classification."""
