"""The validation report: data (join, statistics), format, markdown, scatter plot, writing."""
