"""The memory unit behind one advertised device, and the 4 MiB ListAndWatch ceiling."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30
BASE_MIB = {"MiB": 1, "GiB": 1024}

# The kubelet reads ListAndWatch with gRPC-Go's default 4 MiB receive limit.
KUBELET_MESSAGE_LIMIT = 4 * MIB
# Keep room for the gRPC frame and for IDs that grow by a digit.
MESSAGE_BUDGET = KUBELET_MESSAGE_LIMIT - 64 * 1024
MAX_ID_LENGTH = 63
WORST_HEALTH = "Unhealthy"


@dataclass(frozen=True)
class Unit:
    """One advertised device: `factor` x 1 MiB or `factor` x 1 GiB."""

    base: str = "GiB"
    factor: int = 1

    def __post_init__(self) -> None:
        if self.base not in BASE_MIB or self.factor < 1:
            raise ValueError(f"invalid memory unit {self.factor} x {self.base}")

    @property
    def mib(self) -> int:
        """Size of one unit in MiB."""
        return BASE_MIB[self.base] * self.factor

    @property
    def bytes(self) -> int:
        """Size of one unit in bytes."""
        return self.mib * MIB

    def units_of(self, total_bytes: int) -> int:
        """Units a GPU of `total_bytes` offers: floor(NVML MiB / unit MiB), as gpushare does."""
        return (total_bytes // MIB) // self.mib

    def __str__(self) -> str:
        return f"{self.factor} {self.base}" if self.factor > 1 else f"1 {self.base}"


def device_id(uuid: str, n: int) -> str:
    """The ID of unit `n` of the GPU `uuid`: `<uuid>-<n>`."""
    return f"{uuid}-{n}"


def _varint_len(value: int) -> int:
    length = 1
    while value >= 0x80:
        value >>= 7
        length += 1
    return length


def _field_len(payload: int) -> int:
    """Bytes of one length-delimited field with a one-byte tag."""
    return 1 + _varint_len(payload) + payload


def device_entry_size(id_length: int, health: str = WORST_HEALTH) -> int:
    """Bytes one Device adds to a ListAndWatchResponse (field 1, holding ID and health)."""
    inner = _field_len(id_length) + _field_len(len(health))
    return _field_len(inner)


def gpu_list_size(uuid: str, count: int, health: str = WORST_HEALTH) -> int:
    """Bytes that the `count` devices of one GPU add to a ListAndWatchResponse."""
    total = 0
    low = 0
    digits = 1
    while low < count:
        high = min(count, 10**digits)
        total += (high - low) * device_entry_size(len(uuid) + 1 + digits, health)
        low = high
        digits += 1
    return total


def list_size(gpus: Iterable[tuple[str, int]], unit: Unit, health: str = WORST_HEALTH) -> int:
    """Exact size of the ListAndWatchResponse for (uuid, total bytes) GPUs in `unit`."""
    return sum(gpu_list_size(uuid, unit.units_of(total), health) for uuid, total in gpus)


@dataclass(frozen=True)
class UnitChoice:
    """The unit the plugin advertises, the message size it gives, and why it was coarsened."""

    unit: Unit
    message_bytes: int
    requested: Unit
    requested_bytes: int

    @property
    def coarsened(self) -> bool:
        """Whether the requested unit had to be made larger."""
        return self.unit != self.requested

    def explain(self) -> str:
        """One line for the log."""
        if not self.coarsened:
            return f"advertising {self.unit} units: ListAndWatch is {self.message_bytes} bytes"
        return (
            f"in units of {self.requested} the device list would be {self.requested_bytes} "
            f"bytes, above the kubelet's {KUBELET_MESSAGE_LIMIT}-byte ListAndWatch limit; "
            f"advertising {self.unit} units instead ({self.message_bytes} bytes): every "
            f"requested unit of the resource now means {self.unit.mib} MiB"
        )


def choose_unit(gpus: list[tuple[str, int]], base: str, budget: int = MESSAGE_BUDGET) -> UnitChoice:
    """The smallest power-of-two multiple of `base` whose device list fits in `budget` bytes."""
    requested = Unit(base, 1)
    for uuid, total in gpus:
        if len(device_id(uuid, requested.units_of(total))) > MAX_ID_LENGTH:
            raise ValueError(f"GPU UUID {uuid!r} too long for a {MAX_ID_LENGTH}-character ID")
    requested_bytes = list_size(gpus, requested)
    unit, size = requested, requested_bytes
    while size > budget:
        unit = Unit(base, unit.factor * 2)
        size = list_size(gpus, unit)
    return UnitChoice(unit, size, requested, requested_bytes)
