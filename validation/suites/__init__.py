"""The shipped validation suites (*.toml) and their loaders."""
