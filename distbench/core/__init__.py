"""What every side shares: the knob declaration, the point's config, the strategy registry, the record's schema, errors, the bundled datasets, FLOP peaks and the environment."""
