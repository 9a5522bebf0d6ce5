"""The Stack reconciler: guard list, verdicts, runs, spec validation, git sources, runner."""
