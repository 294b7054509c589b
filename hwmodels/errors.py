"""The one exception tree of the project.

It lives in the lowest layer (hwmodels) so that every package can raise it
without importing the packages above.
"""
from __future__ import annotations


class PksimError(Exception):
    """Base of every error the tools raise on purpose. The CLI prints its message
    on one line and exits with code 2."""


class ConfigError(PksimError):
    """A system, study or option is malformed: names the file, key and value."""


class InfeasibleError(PksimError):
    """The asked-for schedule cannot run on the asked-for hardware."""


class CompileError(PksimError):
    """nvcc failed; carries the command line and stderr."""

    def __init__(self, message: str, command: list[str] | None = None, stderr: str = ""):
        super().__init__(message)
        self.command = list(command or [])
        self.stderr = stderr

    def __str__(self) -> str:
        first = self.stderr.strip().splitlines()[0] if self.stderr.strip() else ""
        base = super().__str__()
        return f"{base}: {first}" if first else base


class ValidationError(PksimError):
    """A kernel's output did not match its reference, or a measurement failed."""


class PksimNote(UserWarning):
    """Not an error: something a result rests on that the user did not say (a buffer cut into
    whole elements per rank). A warning to a caller of the API; the CLI prints it as one
    ``pksim: note:`` line on stderr."""
