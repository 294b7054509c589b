"""Re-export of the project's one exception tree (defined in hwmodels.errors)."""
from hwmodels.errors import (CompileError, ConfigError, InfeasibleError, PksimError,
                             ValidationError)

__all__ = ["PksimError", "ConfigError", "InfeasibleError", "CompileError", "ValidationError"]
