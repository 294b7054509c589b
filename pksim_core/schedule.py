"""The Schedule IR: one way of running one operation on one system.

Frozen and hashable; ``to_json``/``from_json`` round-trip exactly; ``key()`` is a
content hash that names generated files. Codegen and validation build on it, so
fields are only ever added with defaults, never renamed.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from hwmodels.errors import ConfigError
from pksim_core.algorithms import NAMES

IMPLS = ("pk", "nccl")
ALGORITHMS = NAMES                 # the rows' algorithms and NCCL's (pksim_core.algorithms)
MECHANISMS = ("copy-engine", "tma", "register", "multimem")
OVERLAPS = ("none", "inter-sm", "intra-sm")
PEER_ORDERS = ("ring", "staggered", "sequential")
DTYPES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}
PROTOCOLS = ("", "LL", "LL128", "Simple")


@dataclass(frozen=True)
class Schedule:
    op: str
    shape: tuple[tuple[str, int], ...]          # e.g. (("bytes", 1 << 30),) or m, n, k
    world: int
    dtype: str = "bf16"
    domains: int = 1
    impl: str = "pk"
    algorithm: str = "ring"
    mechanism: str = "tma"
    overlap: str = "none"
    comm_sms: int = 16
    chunk_bytes: int = 0                         # 0: one chunk per step
    pipeline_depth: int = 1
    peer_order: str = "ring"
    tile: tuple[int, int, int] = (128, 256, 64)
    protocol: str = ""                           # NCCL protocol when impl = "nccl"
    root: int = 0
    extra: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        checks = (("impl", IMPLS), ("algorithm", ALGORITHMS), ("mechanism", MECHANISMS),
                  ("overlap", OVERLAPS), ("peer_order", PEER_ORDERS), ("dtype", tuple(DTYPES)),
                  ("protocol", PROTOCOLS))
        for name, allowed in checks:
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"schedule {name} = {value!r} is not one of {', '.join(allowed)}")
        for name in ("world", "domains", "comm_sms", "pipeline_depth"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"schedule {name} must be at least 1, got {getattr(self, name)}")
        if self.chunk_bytes < 0:
            raise ConfigError(f"schedule chunk_bytes must be >= 0, got {self.chunk_bytes}")
        if not 0 <= self.root < self.world:
            raise ConfigError(f"schedule root {self.root} is not a rank of world {self.world}")
        for name, value in self.shape:
            if int(value) <= 0:
                raise ConfigError(f"shape {name} must be positive, got {value}")

    # ---- convenience ----------------------------------------------------------
    def dim(self, name: str) -> int:
        for key, value in self.shape:
            if key == name:
                return int(value)
        raise KeyError(f"schedule for {self.op} has no shape entry {name!r}")

    @property
    def element_bytes(self) -> float:
        return DTYPES[self.dtype]

    def with_(self, **changes: Any) -> "Schedule":
        return replace(self, **changes)

    # ---- serialisation ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["shape"] = {k: int(v) for k, v in self.shape}
        out["tile"] = list(self.tile)
        out["extra"] = {k: v for k, v in self.extra}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Schedule":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"schedule: unknown keys {sorted(unknown)}")
        data = dict(data)
        data["shape"] = tuple((k, int(v)) for k, v in dict(data["shape"]).items())
        if "tile" in data:
            data["tile"] = tuple(int(v) for v in data["tile"])
        data["extra"] = tuple(sorted(dict(data.get("extra", {})).items()))
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        return cls.from_dict(json.loads(text))

    def key(self) -> str:
        """12 hex digits of the SHA-256 of the canonical JSON: names generated files."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]

    def label(self) -> str:
        """The schedule's name in tables: '[overlap/]algorithm/mechanism/<SMs>sm', then
        '/chunk<bytes>' when pipelined and '/<peer order>' when not the ring order, e.g.
        'two-shot/tma/32sm/sequential', 'intra-sm/direct/tma/chunk1048576' (intra-SM
        kernels communicate from the compute SMs: no SM count). Within one search the
        label names one schedule; ``--schedule LABEL`` picks it again."""
        parts = [self.algorithm, self.mechanism]
        fused = not any(k == "bytes" for k, _ in self.shape)
        if fused and self.overlap == "none":
            return "none (library GEMM, then NCCL)"
        if self.impl == "nccl":
            return "/".join(["nccl", self.algorithm, self.protocol or "auto"])
        if not (fused and self.overlap == "intra-sm"):
            parts.append(f"{self.comm_sms}sm")
        if self.chunk_bytes:
            parts.append(f"chunk{self.chunk_bytes}")
        if self.peer_order != "ring":
            parts.append(self.peer_order)
        if self.overlap != "none":
            parts.insert(0, self.overlap)
        return "/".join(parts)
