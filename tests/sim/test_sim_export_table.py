"""cuGetExportTable: the private tables NVIDIA's CUDA runtime asks the driver for.

The list of ids answered is kept here: a new table is a decision, not an accident. The
integrity check's digest is checked against an independent HMAC-MD2 (RFC 1319, RFC 2104) of
what the runtime binds it to: driver version, process, thread, the tables' addresses, time,
and each device's UUID and PCI location.
"""

from __future__ import annotations

import json
from pathlib import Path

from simkit import run_py

# id (as the bytes of CUuuid) -> the table's name and its number of slots (None: the table
# does not start with its size).
ANSWERED = {
    "6bd5fb6c5bf4e74a8987d93912fd9df9": ("cudart_interface", 13),
    "42d85a8123f6cb478298f6e78a3aecdc": ("tools_tls", 4),
    "a094798c2e742e7493f20800200c0a66": ("tools_runtime_callback_hooks", 7),
    "c693336e1121df11a8c368f355d89593": ("context_local_storage", None),
    "0ca50b8c1004929a89a7d0df10e77286": ("ctx_create_bypass", 2),
    "195bcbf4d67d024aacc51d29cea631ae": ("heap_access", 3),
    "b10541e1f7c7c74a9f64f223be99f1e2": ("device_extended_rt", 26),
    "d4082055bde6704b8d34ba123c66e1f2": ("integrity_check", 3),
    "263e88607cd2614392f6bbd5006dfa7e": ("context_checks", 4),
    # libcudart 13.5 refuses to start without it; 13.0 never asks.
    "21318c60971432488ca641ff7324c8f2": ("runtime_tools_13_5", 52),
    # cuBLASLt 13 calls its slot 4 without checking that the table came back.
    "1734dc26800d47458726c0f1e7dd8bca": ("sm_topology", 9),
}
# Asked for by libcudart 12.9 and 13.0 before the others; unknown, as on ZLUDA.
UNANSWERED = ["f8cff95121468b4eb9e2fb469e7c0dd9", "00" * 16, "ff" * 16]

MD2_S = bytes.fromhex(
    "292e43c9a2d87c013d3654a1ecf0061362a705f3c0c7738c98932bd9bc4c82ca"
    "1e9b573cfdd4e01667426f188a17e512be4ec4d6da9ede49a0fbf58ebb2fee7a"
    "a968799115b2073f94c210890b225f21807f5d9a5a903227353ecce7bff79703"
    "ff1930b348a5b5d1d75e922aac56aac64fb838d296a47db676fc6be29c7404f1"
    "459d705964718720865bcf65e62da8021b6025adaeb0b9f61c46616934407e0f"
    "5547a323dd51af3ac35cf9cebac5ea262c530d6e85288409d3dfcdf441814d52"
    "6adc37c86cc1abfa24e17b080cbdb14a7888958be363e86de9cbd5fe3b001d39"
    "f2efb70e6658d0e4a67772f8eb754b0a314450b48fed1f1adb998d339f118314"
)
INTEGRITY_KEY = bytes.fromhex("146addae53a9a752aa0841360bf55a9f")

PROBE = """
import ctypes, json, sys, threading
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
out = {"tables": {}}
for hexid in sys.argv[1:]:
    uuid = (ctypes.c_ubyte * 16)(*bytes.fromhex(hexid))
    table = ctypes.c_void_p(1)
    rc = cu.cuGetExportTable(ctypes.byref(table), uuid)
    first = ctypes.c_uint64.from_address(table.value).value if table.value else None
    out["tables"][hexid] = [rc, table.value, first]
integrity = out["tables"]["d4082055bde6704b8d34ba123c66e1f2"][1]
cudart = out["tables"]["6bd5fb6c5bf4e74a8987d93912fd9df9"][1]
slots = (ctypes.c_void_p * 3).from_address(integrity)
check = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64,
                         ctypes.POINTER(ctypes.c_uint64 * 2))(slots[1])
digests = []
for version, when in ((13000, 1), (12091, 1), (13002, 1700000000), (12092, 1700000001)):
    res = (ctypes.c_uint64 * 2)()
    assert check(version, when, ctypes.byref(res)) == 0
    digests.append([version, when, res[0], res[1]])
drv = ctypes.c_int()
cu.cuDriverGetVersion(ctypes.byref(drv))
count = ctypes.c_int()
cu.cuDeviceGetCount(ctypes.byref(count))
devices = []
for d in range(count.value):
    uuid = (ctypes.c_ubyte * 16)()
    cu.cuDeviceGetUuid(uuid, d)
    pci = []
    for attr in (50, 33, 34):  # PCI domain, bus, device
        v = ctypes.c_int()
        cu.cuDeviceGetAttribute(ctypes.byref(v), attr, d)
        pci.append(v.value)
    devices.append([bytes(uuid).hex(), pci])
import os
out.update(digests=digests, driver=drv.value, pid=os.getpid(), thread=threading.get_ident(),
           cudart=cudart, integrity=integrity, fn=slots[1], devices=devices)
print(json.dumps(out))
"""


def md2(data: bytes) -> bytes:
    """MD2 (RFC 1319)."""
    pad = 16 - len(data) % 16
    data += bytes([pad]) * pad
    checksum, last = bytearray(16), 0
    for i in range(0, len(data), 16):
        for j in range(16):
            checksum[j] ^= MD2_S[data[i + j] ^ last]
            last = checksum[j]
    data += bytes(checksum)
    x = bytearray(48)
    for i in range(0, len(data), 16):
        block = data[i : i + 16]
        x[16:32] = block
        x[32:48] = bytes(a ^ b for a, b in zip(x[:16], block, strict=True))
        t = 0
        for j in range(18):
            for k in range(48):
                x[k] ^= MD2_S[t]
                t = x[k]
            t = (t + j) % 256
    return bytes(x[:16])


def hmac_md2(key: bytes, message: bytes) -> bytes:
    """HMAC (RFC 2104) over MD2, whose block is 16 bytes."""
    inner = md2(bytes(k ^ 0x36 for k in key) + message)
    return md2(bytes(k ^ 0x5C for k in key) + inner)


def expected_digest(run: dict, version: int, when: int) -> list[int]:
    """The digest the runtime expects for this process, thread and machine."""
    if version % 10 in (0, 1):
        first = 0x1841181C03CB675C if version % 10 else 0x3341181C03CB675C
        return [first, 0x8ED383AA1F4CD1E8]
    message = b"".join(
        [
            v.to_bytes(4, "little")
            for v in (run["driver"], version, run["pid"], run["thread"] & 0xFFFFFFFF)
        ]
        + [v.to_bytes(8, "little") for v in (run["cudart"], run["integrity"], run["fn"], when)]
    )
    for uuid, pci in run["devices"]:
        message += bytes.fromhex(uuid) + b"".join(v.to_bytes(4, "little") for v in pci)
    digest = hmac_md2(INTEGRITY_KEY, message)
    return [int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")]


def probe(simlib: Path, **sim: object) -> dict:
    ids = [*ANSWERED, *UNANSWERED]
    proc = run_py(simlib, PROBE.replace("sys.argv[1:]", repr(ids)), **sim)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_answered_ids_are_exactly_the_list(simlib: Path) -> None:
    run = probe(simlib)
    for hexid, (name, slots) in ANSWERED.items():
        rc, table, first = run["tables"][hexid]
        assert rc == 0 and table, name
        if slots is not None:
            assert first == slots * 8, name  # the table's size in bytes
    for hexid in UNANSWERED:
        rc, table, _ = run["tables"][hexid]
        assert rc == 801 and table is None, hexid  # CUDA_ERROR_NOT_SUPPORTED, NULL


def test_the_integrity_digest_binds_process_thread_and_devices(simlib: Path) -> None:
    for sim in ({}, {"devices": 3, "driver_version": 12090}):
        run = probe(simlib, **sim)
        assert len(run["devices"]) == sim.get("devices", 1)
        for version, when, *digest in run["digests"]:
            assert digest == expected_digest(run, version, when), (version, sim)
    assert run["digests"][2][2:] != run["digests"][3][2:]


CONTEXTS = """
import ctypes, json
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0

def table(hexid, n):
    t = ctypes.c_void_p()
    assert cu.cuGetExportTable(ctypes.byref(t), (ctypes.c_ubyte * 16)(*bytes.fromhex(hexid))) == 0
    return (ctypes.c_void_p * n).from_address(t.value)

cudart = table("6bd5fb6c5bf4e74a8987d93912fd9df9", 13)
cls = table("c693336e1121df11a8c368f355d89593", 4)
P = ctypes.c_void_p
primary = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(P), ctypes.c_int)(cudart[2])
DTOR = ctypes.CFUNCTYPE(None, P, P, P)
put = ctypes.CFUNCTYPE(ctypes.c_int, P, P, P, DTOR)(cls[0])
delete = ctypes.CFUNCTYPE(ctypes.c_int, P, P)(cls[1])
get = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(P), P, P)(cls[2])
out = {}
def state():
    flags, active = ctypes.c_uint(), ctypes.c_int()
    assert cu.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active)) == 0
    return active.value

handle = P()
assert primary(ctypes.byref(handle), 0) == 0
out["active_after_lookup"] = state()
out["set_inactive"] = cu.cuCtxSetCurrent(handle)
out["sync_inactive"] = cu.cuCtxSynchronize()
retained = P()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(retained), 0) == 0
out["same_handle"] = retained.value == handle.value
out["active_after_retain"] = state()
out["sync_active"] = cu.cuCtxSynchronize()
called = []
dtor = DTOR(lambda ctx, key, value: called.append([ctx, key, value]))
out["put"] = put(handle, P(0x1000), P(0xbeef), dtor)
value = P()
out["get"] = [get(ctypes.byref(value), None, P(0x1000)), value.value]
out["get_missing"] = get(ctypes.byref(value), None, P(0x2000))
out["put2"] = put(None, P(0x2000), P(7), dtor)
out["delete"] = delete(None, P(0x2000))
out["get_deleted"] = get(ctypes.byref(value), None, P(0x2000))
assert cu.cuDevicePrimaryCtxRelease(0) == 0
out["dtors"] = called
out["handle"] = handle.value
print(json.dumps(out))
"""


def test_primary_context_and_context_local_storage(simlib: Path) -> None:
    proc = run_py(simlib, CONTEXTS)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    # The runtime's lookup makes the primary context's handle without activating it; it can be
    # made current, and work in it waits for the retain.
    assert r["active_after_lookup"] == 0 and r["set_inactive"] == 0
    assert r["sync_inactive"] == 709  # CUDA_ERROR_CONTEXT_IS_DESTROYED
    assert r["same_handle"] and r["active_after_retain"] == 1 and r["sync_active"] == 0
    assert r["put"] == 0 and r["get"] == [0, 0xBEEF]
    assert r["get_missing"] == 400  # CUDA_ERROR_INVALID_HANDLE
    assert (r["put2"], r["delete"], r["get_deleted"]) == (0, 0, 400)
    # The last release destroys the context and runs the remaining entry's destructor once.
    assert r["dtors"] == [[r["handle"], 0x1000, 0xBEEF]]
