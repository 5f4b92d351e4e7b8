"""One module per CLI command group; each module only parses options and calls the core."""
