"""The one exception ``pksim.torch`` raises on purpose: a bad argument (dtype, device,
contiguity, a size that differs between ranks), a missing dependency, or a kernel that failed.
Its message is one line naming the op, the argument and the value."""
from __future__ import annotations

from hwmodels.errors import PksimError


class CommError(PksimError):
    """A pksim.torch call that cannot be made as asked (the message says why, in one line)."""
