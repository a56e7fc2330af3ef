"""What /proc says about a process."""

from __future__ import annotations

import os
import signal


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot), or None when there is no such pid.

    Read from the main thread's copy, /proc/<pid>/task/<pid>/stat: the same start time, but
    the kernel does not sum the whole thread group's accounting for it (which stalls while
    many processes start at once).
    """
    found = state_and_start_time(pid)
    return found[1] if found else None


def state_and_start_time(pid: int) -> tuple[int, int] | None:
    """(state letter as a byte value, start time) of the process's main thread, from the same
    file as `start_time`; None when there is no such pid."""
    if pid <= 0:
        return None
    try:
        # os.open and one read: half the cost of open() (the exporter asks for every GPU
        # process at every scrape). The line is far shorter than 4 KiB.
        fd = os.open(f"/proc/{pid}/task/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            stat = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = stat[stat.rindex(b")") + 2 :].split()  # the command name may hold spaces
        return fields[0][0], int(fields[19])
    except (OSError, ValueError, IndexError):  # no such pid (any more), or a pid out of range
        return None


def signal_process(pid: int, started: int, signum: int) -> bool:
    """Send `signum` to `pid` if it is still the process that started at `started` (through a
    pidfd opened before the start time is checked, so a recycled pid is never hit); whether it
    was sent."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone already
        return False
    try:
        if start_time(pid) != started:
            return False
        signal.pidfd_send_signal(fd, signum)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
