"""One table of limit-variable environments and what each must give.

Shared by every reader of the limit variables: the shim (tests/shim/test_limit_agreement.py
runs each case in a process on the simulator) and `cgpu.core.request.parse_env`; the OCI hook and
the device plugin can be fed the same table. A case either gives a slice per device ordinal (None:
that device has no slice, the program sees the whole device) or is refused naming a variable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
DEVICE = 16 * GiB
V100 = 16130 * MiB  # the seeds' 16130 MiB V100
ALIYUN = ("ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV")
VOLCANO = ("VOLCANO_GPU_ALLOCATED", "VOLCANO_GPU_MEMORY_TOTAL")


@dataclass(frozen=True)
class LimitCase:
    """An environment, the devices' totals by ordinal, and the expected outcome."""

    id: str
    env: dict[str, str]
    slices: tuple[int | None, ...] = ()  # expected slice per ordinal (None: no slice)
    refused: str | None = None  # the variable a refusal names
    totals: tuple[int, ...] = field(default=(DEVICE,))
    compute: tuple[int | None, ...] = ()  # expected compute percent per ordinal (() = none)
    policy: str = "fixed"
    priority: str = "normal"


def _aliyun(units: str, of: str) -> dict[str, str]:
    return dict(zip(ALIYUN, (units, of), strict=True))


def _volcano(units: str, of: str) -> dict[str, str]:
    return dict(zip(VOLCANO, (units, of), strict=True))


def _ok(id_: str, env: dict[str, str], *slices: int | None, totals: tuple[int, ...] = (DEVICE,)):
    return LimitCase(id_, env, slices=slices, totals=totals)


def _bad(id_: str, env: dict[str, str], variable: str, totals: tuple[int, ...] = (DEVICE,)):
    return LimitCase(id_, env, refused=variable, totals=totals)


TWO = (DEVICE, 8 * GiB)

VALID: list[LimitCase] = [
    _ok("nothing", {}, None),
    _ok("fixed-gib", {"CGPU_MEM_LIMIT": "3GiB"}, 3 * GiB),
    _ok("fixed-m", {"CGPU_MEM_LIMIT": "1536M"}, 1536 * MiB),
    _ok("fixed-bytes", {"CGPU_MEM_LIMIT": "1073741824"}, GiB),
    _ok("fixed-k", {"CGPU_MEM_LIMIT": "524288K"}, 512 * MiB),
    _ok("fixed-kib", {"CGPU_MEM_LIMIT": "4096KiB"}, 4 * MiB),
    _ok("fixed-b", {"CGPU_MEM_LIMIT": "4096B"}, 4096),
    _ok("fixed-tib", {"CGPU_MEM_LIMIT": "1TiB"}, TiB),
    _ok("fixed-one-byte", {"CGPU_MEM_LIMIT": "1"}, 1),
    _ok("fixed-blanks-around", {"CGPU_MEM_LIMIT": " \t2GiB \n"}, 2 * GiB),
    _ok("fixed-leading-zeros", {"CGPU_MEM_LIMIT": "0002GiB"}, 2 * GiB),
    _ok("fixed-above-device", {"CGPU_MEM_LIMIT": "32GiB"}, 32 * GiB),
    _ok("ordinal-wins", {"CGPU_MEM_LIMIT_0": "2GiB", "CGPU_MEM_LIMIT": "3GiB"}, 2 * GiB),
    _ok(
        "ordinals-two-devices",
        {"CGPU_MEM_LIMIT_0": "1GiB", "CGPU_MEM_LIMIT_1": "2GiB"},
        GiB,
        2 * GiB,
        totals=TWO,
    ),
    _ok("ordinal-1-only", {"CGPU_MEM_LIMIT_1": "2GiB"}, None, 2 * GiB, totals=TWO),
    _ok(
        "ordinal-and-default",
        {"CGPU_MEM_LIMIT_1": "2GiB", "CGPU_MEM_LIMIT": "1GiB"},
        GiB,
        2 * GiB,
        totals=TWO,
    ),
    _ok(
        "ordinal-then-share",
        {"CGPU_MEM_LIMIT_1": "2GiB", **_aliyun("4", "16")},
        DEVICE // 4,
        2 * GiB,
        totals=TWO,
    ),
    _ok("ordinal-15-unseen", {"CGPU_MEM_LIMIT_15": "1GiB"}, None),
    _ok("aliyun-seed-004", _aliyun("4", "15"), V100 * 4 // 15, totals=(V100,)),
    _ok("aliyun-seed-001", _aliyun("2", "15"), V100 * 2 // 15, totals=(V100,)),
    _ok("aliyun-whole", _aliyun("15", "15"), V100, totals=(V100,)),
    _ok("aliyun-two-devices", _aliyun("1", "2"), DEVICE // 2, 4 * GiB, totals=TWO),
    _ok("aliyun-blanks-and-zeros", _aliyun(" 04 ", "015\n"), V100 * 4 // 15, totals=(V100,)),
    _ok(
        "aliyun-huge-units",
        _aliyun("18446744073709551615", "18446744073709551615"),
        DEVICE,
    ),
    _ok("volcano", _volcano("1024", "16130"), V100 * 1024 // 16130, totals=(V100,)),
    _ok("aliyun-before-volcano", {**_aliyun("4", "15"), **_volcano("1", "2")}, DEVICE * 4 // 15),
    _ok("fixed-before-share", {"CGPU_MEM_LIMIT": "1GiB", **_aliyun("4", "15")}, GiB),
    _ok("disable-true", {"CGPU_DISABLE": "true", "CGPU_MEM_LIMIT": "1GiB"}, None),
    _ok("disable-upper", {"CGPU_DISABLE": "TRUE", "CGPU_MEM_LIMIT": "1GiB"}, None),
    _ok("disable-1", {"CGPU_DISABLE": "1", "CGPU_MEM_LIMIT": "1GiB"}, None),
    _ok("disable-yes", {"CGPU_DISABLE": " Yes ", "CGPU_MEM_LIMIT": "1GiB"}, None),
    _ok("disable-beats-malformed", {"CGPU_DISABLE": "true", "CGPU_MEM_LIMIT": "lots"}, None),
    _ok("disable-alone", {"CGPU_DISABLE": "true"}, None),
    _ok("disable-false", {"CGPU_DISABLE": "false", "CGPU_MEM_LIMIT": "1GiB"}, GiB),
    _ok("disable-0", {"CGPU_DISABLE": "0", "CGPU_MEM_LIMIT": "1GiB"}, GiB),
    _ok("disable-empty", {"CGPU_DISABLE": "", "CGPU_MEM_LIMIT": "1GiB"}, GiB),
    _ok("disable-on", {"CGPU_DISABLE": "on", "CGPU_MEM_LIMIT": "1GiB"}, GiB),
    _ok("disable-truee", {"CGPU_DISABLE": "truee", "CGPU_MEM_LIMIT": "1GiB"}, GiB),
    _ok("unrelated-prefix", {"CGPU_MEM_LIMITS": "lots"}, None),
]

_SIZES_BAD = {
    "word": "lots",
    "zero": "0",
    "zero-gib": "0GiB",
    "negative": "-1G",
    "plus": "+1G",
    "fraction": "1.5GiB",
    "bad-suffix": "4XB",
    "lower-suffix": "1gib",
    "kb": "1KB",
    "empty": "",
    "blank": "   ",
    "overflow": "99999999999999999999",
    "overflow-shift": "17179869184TiB",
    "inner-space": "1 GiB",
    "trailing-word": "1GiB extra",
    "hex": "0x100",
    "exponent": "1e9",
    "newline-inside": "1GiB\nCGPU_DISABLE=true",
}

_UNITS_BAD = {
    "word": "four",
    "zero": "0",
    "negative": "-4",
    "plus": "+4",
    "fraction": "4.0",
    "empty": "",
    "blank": " ",
    "overflow": "18446744073709551616",
    "two-numbers": "4 4",
    "suffix": "4GiB",
}

MALFORMED: list[LimitCase] = [
    *(_bad(f"fixed-{k}", {"CGPU_MEM_LIMIT": v}, "CGPU_MEM_LIMIT") for k, v in _SIZES_BAD.items()),
    *(
        _bad(f"ordinal-{k}", {"CGPU_MEM_LIMIT_0": v}, "CGPU_MEM_LIMIT_0")
        for k, v in _SIZES_BAD.items()
    ),
    _bad("ordinal-16", {"CGPU_MEM_LIMIT_16": "1GiB"}, "CGPU_MEM_LIMIT_16"),
    _bad(
        "ordinal-huge",
        {"CGPU_MEM_LIMIT_99999999999999999999": "1GiB"},
        "CGPU_MEM_LIMIT_99999999999999999999",
    ),
    _bad("ordinal-leading-zero", {"CGPU_MEM_LIMIT_01": "1GiB"}, "CGPU_MEM_LIMIT_01"),
    _bad("ordinal-letter", {"CGPU_MEM_LIMIT_X": "1GiB"}, "CGPU_MEM_LIMIT_X"),
    _bad("ordinal-name-negative", {"CGPU_MEM_LIMIT_-1": "1GiB"}, "CGPU_MEM_LIMIT_-1"),
    _bad("ordinal-name-empty", {"CGPU_MEM_LIMIT_": "1GiB"}, "CGPU_MEM_LIMIT_"),
    _bad(
        "overridden-default-still-checked",
        {"CGPU_MEM_LIMIT_0": "1GiB", "CGPU_MEM_LIMIT": "lots"},
        "CGPU_MEM_LIMIT",
    ),
    *(_bad(f"aliyun-units-{k}", _aliyun(v, "15"), ALIYUN[0]) for k, v in _UNITS_BAD.items()),
    *(_bad(f"aliyun-of-{k}", _aliyun("4", v), ALIYUN[1]) for k, v in _UNITS_BAD.items()),
    _bad("aliyun-units-above-of", _aliyun("16", "15"), ALIYUN[0]),
    _bad("aliyun-container-only", {ALIYUN[0]: "4"}, ALIYUN[1]),
    _bad("aliyun-dev-only", {ALIYUN[1]: "15"}, ALIYUN[0]),
    _bad("volcano-allocated-only", {VOLCANO[0]: "1024"}, VOLCANO[1]),
    _bad("volcano-total-only", {VOLCANO[1]: "16130"}, VOLCANO[0]),
    _bad("volcano-units-above-of", _volcano("2", "1"), VOLCANO[0]),
    _bad("volcano-word", _volcano("some", "16130"), VOLCANO[0]),
    _bad("lower-share-still-checked", {**_aliyun("4", "15"), VOLCANO[0]: "1"}, VOLCANO[1]),
    _bad(
        "share-under-fixed-still-checked",
        {"CGPU_MEM_LIMIT": "1GiB", **_aliyun("x", "15")},
        ALIYUN[0],
    ),
]


def _compute(
    id_: str,
    env: dict[str, str],
    *compute: int | None,
    policy: str = "fixed",
    priority: str = "normal",
    slices: tuple[int | None, ...] | None = None,
    totals: tuple[int, ...] = (DEVICE,),
):
    return LimitCase(
        id_,
        env,
        slices=slices if slices is not None else (None,) * len(totals),
        totals=totals,
        compute=compute,
        policy=policy,
        priority=priority,
    )


COMPUTE_VALID: list[LimitCase] = [
    _compute("compute-30", {"CGPU_COMPUTE_LIMIT": "30"}, 30),
    _compute("compute-percent-sign", {"CGPU_COMPUTE_LIMIT": " 30% "}, 30),
    _compute("compute-1", {"CGPU_COMPUTE_LIMIT": "1"}, 1),
    _compute("compute-100", {"CGPU_COMPUTE_LIMIT": "100"}, 100),
    _compute(
        "compute-share",
        {"CGPU_COMPUTE_LIMIT": "50", "CGPU_COMPUTE_POLICY": "Share"},
        50,
        policy="share",
    ),
    _compute("compute-fixed", {"CGPU_COMPUTE_LIMIT": "50", "CGPU_COMPUTE_POLICY": " fixed"}, 50),
    _compute("compute-ordinal", {"CGPU_COMPUTE_LIMIT_1": "20"}, None, 20, totals=TWO),
    _compute(
        "compute-ordinal-over-default",
        {"CGPU_COMPUTE_LIMIT": "60", "CGPU_COMPUTE_LIMIT_0": "25"},
        25,
        60,
        totals=TWO,
    ),
    _compute(
        "compute-with-memory",
        {"CGPU_COMPUTE_LIMIT": "40", "CGPU_MEM_LIMIT": "1GiB"},
        40,
        slices=(GiB,),
    ),
    _compute(
        "compute-priority-high",
        {"CGPU_COMPUTE_LIMIT": "40", "CGPU_COMPUTE_PRIORITY": "high"},
        40,
        priority="high",
    ),
    _compute(
        "compute-priority-low-any-case",
        {
            "CGPU_COMPUTE_LIMIT": "60",
            "CGPU_COMPUTE_POLICY": "share",
            "CGPU_COMPUTE_PRIORITY": " LOW\n",
        },
        60,
        policy="share",
        priority="low",
    ),
    _compute(
        "compute-priority-normal",
        {"CGPU_COMPUTE_LIMIT": "30", "CGPU_COMPUTE_PRIORITY": "Normal"},
        30,
    ),
    _ok("compute-policy-alone", {"CGPU_COMPUTE_POLICY": "share"}, None),
    _ok("compute-priority-alone", {"CGPU_COMPUTE_PRIORITY": "high"}, None),
    _ok("compute-disabled", {"CGPU_DISABLE": "yes", "CGPU_COMPUTE_LIMIT": "junk"}, None),
]

_PERCENTS_BAD = {
    "zero": "0",
    "over": "101",
    "word": "half",
    "fraction": "30.5",
    "negative": "-30",
    "empty": "",
    "two-signs": "30%%",
    "inner-space": "3 0",
    "huge": "100000",
}

COMPUTE_MALFORMED: list[LimitCase] = [
    *(
        _bad(f"compute-{k}", {"CGPU_COMPUTE_LIMIT": v}, "CGPU_COMPUTE_LIMIT")
        for k, v in _PERCENTS_BAD.items()
    ),
    _bad("compute-ordinal-zero", {"CGPU_COMPUTE_LIMIT_0": "0"}, "CGPU_COMPUTE_LIMIT_0"),
    _bad("compute-ordinal-16", {"CGPU_COMPUTE_LIMIT_16": "30"}, "CGPU_COMPUTE_LIMIT_16"),
    _bad("compute-ordinal-leading-zero", {"CGPU_COMPUTE_LIMIT_01": "30"}, "CGPU_COMPUTE_LIMIT_01"),
    _bad(
        "compute-policy-word",
        {"CGPU_COMPUTE_LIMIT": "30", "CGPU_COMPUTE_POLICY": "max"},
        "CGPU_COMPUTE_POLICY",
    ),
    _bad("compute-policy-empty", {"CGPU_COMPUTE_POLICY": ""}, "CGPU_COMPUTE_POLICY"),
    *(
        _bad(
            f"compute-priority-{k}",
            {"CGPU_COMPUTE_LIMIT": "30", "CGPU_COMPUTE_PRIORITY": v},
            "CGPU_COMPUTE_PRIORITY",
        )
        for k, v in {
            "word": "urgent",
            "empty": "",
            "number": "1",
            "prefix": "hi",
            "longer": "highest",
            "two": "high low",
        }.items()
    ),
    _bad(
        "compute-priority-alone-still-checked",
        {"CGPU_COMPUTE_PRIORITY": "max"},
        "CGPU_COMPUTE_PRIORITY",
    ),
    _bad(
        "compute-overridden-default-still-checked",
        {"CGPU_COMPUTE_LIMIT_0": "30", "CGPU_COMPUTE_LIMIT": "x"},
        "CGPU_COMPUTE_LIMIT",
    ),
    _bad(
        "compute-bad-with-good-memory",
        {"CGPU_MEM_LIMIT": "1GiB", "CGPU_COMPUTE_LIMIT": "0"},
        "CGPU_COMPUTE_LIMIT",
    ),
]

CASES: list[LimitCase] = VALID + MALFORMED + COMPUTE_VALID + COMPUTE_MALFORMED
