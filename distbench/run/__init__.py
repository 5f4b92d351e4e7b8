"""Running one point: the planner, the point runner, the launchers and the process executor, the rank guard, signals, root causes of failures, telemetry and multi-node facts."""
