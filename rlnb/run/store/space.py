"""A full disk, named as such: which folder, how much space was free and how much the write
needed, instead of the library's own line (torch's zip writer says ``unexpected pos``).

    try:
        save_checkpoint(...)
    except (OSError, RuntimeError) as err:
        if out_of_space(err, root, needed):
            raise disk_full("checkpoint step_000002", root, needed) from None
        raise

``DiskFull`` is an ``OSError``: a machine fault, not a user's mistake (the CLI exits 1 with its
one line). The atomic writes (``atomic.py``) leave what was written before intact.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


class DiskFull(OSError):
    """A write failed for want of space; the message says where, what and how much."""


def free_bytes(folder: str | Path) -> int:
    """Free bytes on the filesystem of ``folder`` (its nearest existing parent)."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def out_of_space(err: BaseException, folder: str | Path, needed: int | None = None) -> bool:
    """Whether ``err`` is a write that failed for want of space in ``folder``: ENOSPC / EDQUOT,
    or any error while less than ``needed`` bytes are free (writers that hide the errno)."""
    if isinstance(err, OSError) and err.errno in NO_SPACE:
        return True
    return needed is not None and free_bytes(folder) < needed


def disk_full(what: str, folder: str | Path, needed: int | None = None) -> DiskFull:
    """The error to raise: ``no space left on the device of <folder>: <what> needs about N MiB,
    M MiB free; ...``."""
    need = "" if needed is None else f" needs about {_mib(needed)},"
    return DiskFull(f"no space left on the device of {folder}: {what}{need} "
                    f"{_mib(free_bytes(folder))} free. What was written before is intact: free "
                    "some space (or point the run elsewhere), then resume")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
