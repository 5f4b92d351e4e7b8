"""Results once measured: the store, collecting cluster records, statistics, the step split, the regression gate and the terminal output."""
