"""Workloads: operations, their sizes, and the algorithms that implement them."""
