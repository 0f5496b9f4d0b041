"""KernelReport: what the server measured for one request."""

from dataclasses import dataclass, field
from typing import List


@dataclass(frozen=True)
class LaunchConfig:
    grid: List[int] = field(default_factory=list)
    block: List[int] = field(default_factory=list)
    shared_memory_bytes: int = 0
    registers_per_thread: int = 0
    theoretical_occupancy: float = 0.0
    waves: float = 0.0


@dataclass(frozen=True)
class KernelReport:
    """proto KernelReport as a dataclass; see tensor_ops.proto for each
    field's meaning (kernel_seconds is the compute's wall time on CPU)."""

    variant: str
    backend: str
    device: str
    kernel_seconds: float
    bytes_moved: int
    achieved_bytes_per_second: float
    flops: float
    achieved_flops_per_second: float
    arithmetic_intensity: float
    peak_bandwidth_fraction: float
    bound: str
    selection_source: str
    selection_reason: str
    launch: LaunchConfig
    cold_start: bool
    batch_size: int
    device_ordinal: int
    placement: str
    staged_bytes: int

    @classmethod
    def from_proto(cls, r):
        launch = LaunchConfig(
            grid=list(r.launch.grid), block=list(r.launch.block),
            shared_memory_bytes=r.launch.shared_memory_bytes,
            registers_per_thread=r.launch.registers_per_thread,
            theoretical_occupancy=r.launch.theoretical_occupancy,
            waves=r.launch.waves)
        return cls(
            variant=r.variant, backend=r.backend, device=r.device,
            kernel_seconds=r.kernel_seconds, bytes_moved=r.bytes_moved,
            achieved_bytes_per_second=r.achieved_bytes_per_second,
            flops=r.flops,
            achieved_flops_per_second=r.achieved_flops_per_second,
            arithmetic_intensity=r.arithmetic_intensity,
            peak_bandwidth_fraction=r.peak_bandwidth_fraction,
            bound=r.bound, selection_source=r.selection_source,
            selection_reason=r.selection_reason, launch=launch,
            cold_start=r.cold_start, batch_size=r.batch_size,
            device_ordinal=r.device_ordinal, placement=r.placement,
            staged_bytes=r.staged_bytes)
