"""The opaque parameters of a claim that stands in for a device-plugin request.

`cgpu webhook` writes them into the ResourceClaimTemplates it makes; the DRA driver reads them
back at prepare, so that a container under such a claim gets what the device plugin gave it:
the same variables (`ALIYUN_COM_GPU_MEM_*` or `VOLCANO_GPU_*`) and a slice of exactly the
memory asked for (the claim's consumed capacity may be rounded up to the driver's step).

    {"apiVersion": "gpu.cgpu.io/v1alpha1", "kind": "DevicePluginContract",
     "contract": "gpushare", "units": 2, "unitMiB": 1024, "memory": "2Gi"}

`units` is the container's units on each GPU, `unitMiB` the size of one unit, `memory` the
slice on each GPU (units x unit). The driver checks every field; one it does not know is an
error, never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cgpu.core.layout import CLAIM_CONFIG_API_VERSION, CLAIM_CONFIG_KIND
from cgpu.core.quantity import QuantityError, format_bytes, parse_quantity

GPUSHARE = "gpushare"  # ALIYUN_COM_GPU_MEM_CONTAINER / _DEV / _IDX
VOLCANO = "volcano"  # VOLCANO_GPU_ALLOCATED / _MEMORY_TOTAL
CONTRACTS = (GPUSHARE, VOLCANO)
MIB = 1 << 20
_FIELDS = {"apiVersion", "kind", "contract", "units", "unitMiB", "memory"}


class ClaimConfigError(ValueError):
    """Opaque parameters that are not a valid DevicePluginContract."""


@dataclass(frozen=True)
class DevicePluginContract:
    """What a container asked for under the device plugin, on each of its GPUs."""

    contract: str  # GPUSHARE or VOLCANO
    units: int  # units on each GPU
    unit_mib: int  # MiB in one unit (gpushare: 1024 or 1; Volcano: 1)

    def __post_init__(self) -> None:
        if self.contract not in CONTRACTS:
            raise ClaimConfigError(f"contract {self.contract!r} is not one of {CONTRACTS}")
        if self.units < 1 or self.unit_mib < 1:
            raise ClaimConfigError(f"units {self.units} x {self.unit_mib} MiB is not positive")

    @property
    def memory(self) -> int:
        """The slice on each GPU, in bytes."""
        return self.units * self.unit_mib * MIB

    def parameters(self) -> dict[str, Any]:
        """The opaque parameters, as a claim carries them."""
        return {
            "apiVersion": CLAIM_CONFIG_API_VERSION,
            "kind": CLAIM_CONFIG_KIND,
            "contract": self.contract,
            "units": self.units,
            "unitMiB": self.unit_mib,
            "memory": format_bytes(self.memory),
        }


def is_contract(parameters: object) -> bool:
    """Whether `parameters` claim to be a DevicePluginContract (valid or not)."""
    return (
        isinstance(parameters, dict)
        and parameters.get("apiVersion") == CLAIM_CONFIG_API_VERSION
        and parameters.get("kind") == CLAIM_CONFIG_KIND
    )


def parse_contract(parameters: object) -> DevicePluginContract:
    """The contract in `parameters`; ClaimConfigError naming the field that is wrong."""
    if not is_contract(parameters):
        raise ClaimConfigError(
            f"opaque parameters are not {CLAIM_CONFIG_API_VERSION} {CLAIM_CONFIG_KIND}"
        )
    assert isinstance(parameters, dict)
    unknown = sorted(set(parameters) - _FIELDS)
    if unknown:
        raise ClaimConfigError(f"{CLAIM_CONFIG_KIND}: unknown field(s) {', '.join(unknown)}")
    units, unit_mib = parameters.get("units"), parameters.get("unitMiB")
    for name, value in (("units", units), ("unitMiB", unit_mib)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ClaimConfigError(f"{CLAIM_CONFIG_KIND}: {name} {value!r} is not an integer")
    assert isinstance(units, int) and isinstance(unit_mib, int)
    contract = DevicePluginContract(str(parameters.get("contract")), units, unit_mib)
    try:
        memory = parse_quantity(parameters.get("memory"))
    except QuantityError as err:
        raise ClaimConfigError(f"{CLAIM_CONFIG_KIND}: memory: {err}") from None
    if memory != contract.memory:
        raise ClaimConfigError(
            f"{CLAIM_CONFIG_KIND}: memory {parameters.get('memory')!r} is not units x unitMiB "
            f"({format_bytes(contract.memory)})"
        )
    return contract
