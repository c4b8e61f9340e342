"""Other processes of this host: whether one still exists, its state, its program name, who has
a file open or holds its ``flock``; and a child process that dies with its parent.

The one place twice looks at other processes: to free a lease whose holder has exited
(``twice.ledger.lease_holders``), to name who holds a file lock and whether it is stopped
(``twice.ledger.lock_holders``, the DuckDB and Parquet destinations), to tell whether a dbt
run is still this attempt's (``twice.drivers.dbt``), and to end a process-isolated attempt with
its holder (``twice.engine.timeouts``). Read-only and best effort: what cannot be read is None
("cannot tell") and callers do what they would do without it. Never the command line's text,
which may hold a password.

It is also the one module of twice with Linux-only calls (``/proc``, ``prctl``, ``renameat2``),
each behind a portable fallback (docs/architecture.md, "Portability"), used where ``/proc`` is
missing (macOS, the BSDs) or when ``$TWICE_PROCESSES`` is ``portable`` (``PORTABLE``; tests
force it):

============================  ====================================  ==========================
question                      Linux                                 elsewhere
============================  ====================================  ==========================
exists                        ``os.kill(pid, 0)``                   the same
state (stopped, zombie)       ``/proc/PID/stat``                    ``ps -o stat= -p PID``
program name                  ``/proc/PID/comm``                    ``ps -o comm= -p PID``
start time                    ``/proc/PID/stat`` + ``btime``        ``ps -o lstart=`` (to 1 s)
command line names a folder   ``/proc/PID/cmdline``                 ``ps -o args= -p PID``
who has a file open           ``/proc/*/fd``                        ``lsof -t`` (if installed)
who holds a ``flock``         ``/proc/locks``                       None (cannot tell)
die with the parent           ``prctl(PR_SET_PDEATHSIG, SIGKILL)``  a thread polling getppid
swap two directories          ``renameat2(RENAME_EXCHANGE)``        False: two renames
============================  ====================================  ==========================

The last is no question about processes: it is here because it is Linux's (the Parquet
destination's atomic commit, ``twice.destinations.parquet``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")

#: Use the portable fallbacks even where ``/proc`` exists (``TWICE_PROCESSES=portable``).
PORTABLE = os.environ.get("TWICE_PROCESSES", "").strip().lower() == "portable"

#: How often a child without ``PR_SET_PDEATHSIG`` checks that its parent is still there.
PARENT_POLL_SECONDS = 0.2

_PS_TIMEOUT_SECONDS = 5.0


def _linux(proc: Path) -> bool:
    """Whether to read ``proc`` (Linux's ``/proc``, or a test's copy of its layout)."""
    return not PORTABLE and proc.is_dir()


def _ps(pid: int, field: str) -> str | None:
    """``ps -o FIELD= -p PID`` (POSIX; the C locale), or None (no such process, no ``ps``)."""
    ps = shutil.which("ps")
    if ps is None or pid <= 0:
        return None
    try:
        done = subprocess.run([ps, "-o", f"{field}=", "-p", str(pid)], capture_output=True,
                              text=True, timeout=_PS_TIMEOUT_SECONDS, check=False,
                              env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and text else None


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 1:].split()  # "pid (comm) S ...": comm may hold ")"


def state(pid: int, *, proc: Path = PROC) -> str | None:
    """The process's state letter (``R``, ``S``, ``T`` stopped, ``t`` traced, ``Z`` zombie),
    or None when it cannot be read."""
    if not _linux(proc):
        said = _ps(pid, "stat")
        return said[0] if said else None
    fields = _stat_fields(pid, proc)
    return fields[0] if fields else None


def program(pid: int, *, proc: Path = PROC) -> str:
    """The process's program name (``comm``, at most 15 characters), or ``?``."""
    if not _linux(proc):
        said = _ps(pid, "comm")
        return os.path.basename(said)[:15] if said else "?"  # macOS's ps says the whole path
    try:
        return (proc / str(pid) / "comm").read_text().strip() or "?"
    except OSError:
        return "?"


def started_at(pid: int, *, proc: Path = PROC) -> float | None:
    """When the process started, as a POSIX timestamp (to the clock tick; to the second where
    ``ps`` says it), or None when it cannot be read: a pid can be reused, and a process that
    started after a holder began its work is not that holder."""
    if not _linux(proc):
        said = _ps(pid, "lstart")  # "Sun Dec  6 10:43:30 2026", local time, C locale
        try:
            return time.mktime(time.strptime(" ".join((said or "").split()),
                                             "%a %b %d %H:%M:%S %Y"))
        except (ValueError, OverflowError):
            return None
    try:
        fields = _stat_fields(pid, proc)
        boot = next(line for line in (proc / "stat").read_text().splitlines()
                    if line.startswith("btime "))
        ticks = int((fields or [])[19])  # field 22: starttime
        return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def stopped(pid: int, *, proc: Path = PROC) -> bool:
    """Stopped by a signal (SIGSTOP, Ctrl-Z) or a debugger: it holds what it holds until it
    is resumed or ended."""
    return state(pid, proc=proc) in ("T", "t")


def gone(pid: int, *, proc: Path = PROC) -> bool:
    """No such process, or one that has exited and waits to be reaped (a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # not ours to signal: it exists
        return False
    return state(pid, proc=proc) in ("Z", "X")


def command_mentions(pid: int, text: str, *, proc: Path = PROC) -> bool | None:
    """Whether the process's command line holds ``text`` (a folder), or None when it cannot
    be read. The command line itself is never returned (it may hold a password)."""
    if not _linux(proc):
        said = _ps(pid, "args")
        return None if said is None else text in said
    try:
        cmdline = (proc / str(pid) / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return text in cmdline.replace("\0", " ")


def having_open(paths: Iterable[str], *, proc: Path = PROC, limit: int = 10_000) -> list[int]:
    """Other processes (not this one) with one of ``paths`` open, by pid; at most ``limit``
    processes are looked at. [] when nobody can be named."""
    targets = {os.path.realpath(path) for path in paths}
    if not _linux(proc):
        return _lsof(sorted(path for path in targets if os.path.exists(path)))
    try:
        entries = [e.name for e in os.scandir(proc) if e.name.isdigit()][:limit]
    except OSError:
        return []
    return sorted(int(name) for name in entries
                  if int(name) != os.getpid() and _has_open(proc / name / "fd", targets))


def _has_open(fd_dir: Path, targets: set[str]) -> bool:
    try:
        links = list(os.scandir(fd_dir))
    except OSError:  # gone, or not ours to look at
        return False
    for link in links:
        try:
            if os.readlink(link.path) in targets:
                return True
        except OSError:
            continue
    return False


def _lsof(paths: list[str]) -> list[int]:
    lsof = shutil.which("lsof")
    if lsof is None or not paths:
        return []
    try:
        done = subprocess.run([lsof, "-t", "--", *paths], capture_output=True, text=True,
                              timeout=_PS_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    pids = {int(word) for word in done.stdout.split() if word.isdigit()}
    return sorted(pids - {os.getpid()})


def flock_holder(fd: int, *, proc: Path = PROC) -> int | None:
    """Another process holding a ``flock`` on the file open as ``fd``, as ``/proc/locks``
    names it; None when none is named or it cannot be told (no ``/proc``: no portable way)."""
    if not _linux(proc):
        return None
    try:
        found = os.fstat(fd)
        with open(proc / "locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return None
    # /proc/locks names a file as MAJOR:MINOR:INODE, the device numbers in hex
    file = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[4] == "->":
            continue
        pid = fields[4]
        if fields[5] == file and pid.isdigit() and int(pid) != os.getpid():
            return int(pid)
    return None


def die_with_parent(parent: int) -> None:
    """End this process when ``parent`` (the process that started it) dies, and now if it
    already has: a process-isolated attempt must not outlive the holder that started it.

    Linux: the kernel kills it (``PR_SET_PDEATHSIG``). Elsewhere, or where ``prctl`` cannot be
    called: a daemon thread checks every ``PARENT_POLL_SECONDS`` that the parent is still
    ``os.getppid()`` (an orphan is adopted by another process) and ends the process if not."""
    if os.getppid() != parent:  # the parent died before anything was armed
        os._exit(1)
    if not PORTABLE and sys.platform.startswith("linux") and _pdeathsig():
        if os.getppid() != parent:  # it died while the signal was being armed
            os._exit(1)
        return
    threading.Thread(target=_watch_parent, args=(parent,), name="twice-parent-watch",
                     daemon=True).start()


def _pdeathsig() -> bool:
    import ctypes
    import ctypes.util
    import signal

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return bool(libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _load_renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc without it
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2 = _load_renameat2()


def can_exchange() -> bool:
    """Whether :func:`exchange` may swap here (Linux's ``renameat2``, not forced portable)."""
    return not PORTABLE and _renameat2 is not None


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``). False when the platform
    or the file system cannot (the caller falls back); any other failure is raised."""
    if not can_exchange():
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"renameat2 exchange failed: {os.strerror(code)}", str(a))


@dataclass(frozen=True)
class Process:
    """What an error may say of another process: its id, program name and whether stopped."""

    pid: int
    program: str
    stopped: bool

    def describe(self) -> str:
        """``PID program``, with ``(stopped)`` when it is."""
        return f"{self.pid} {self.program}{' (stopped)' if self.stopped else ''}"


def look(pid: int, *, proc: Path = PROC) -> Process:
    """The process as this host shows it now."""
    return Process(pid, program(pid, proc=proc), stopped(pid, proc=proc))
