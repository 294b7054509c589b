"""The click command-line interface: one module per command group."""
