"""distbench converge: time to accuracy (issue 23): data, LR rules, the training loop, the points, statistics."""
