"""Crash-safe writes: a file or a directory is either the old one or the complete new one.

A run killed mid-save (out of memory, preempted job, Stop button) must never leave a half-written
``config.yaml``, rollout file or checkpoint that a resume would then trust.

Implementation choices:
1) Files are written to a hidden temporary sibling (``.name.XXXX.tmp``, same directory, hence
   the same file system), flushed and fsync'ed, then moved into place with ``os.replace``, which
   is atomic on POSIX and Windows. The parent directory is fsync'ed afterwards so the rename
   itself survives a power cut (skipped where directories cannot be opened, e.g. Windows).
2) ``atomic_dir`` builds a directory under a hidden temporary name and renames it into place only
   when the ``with`` block succeeds; every file in it is fsync'ed first. On an exception the
   temporary directory is removed and the exception re-raised, so no final directory appears.
3) POSIX cannot rename a directory over a non-empty one, so an existing ``final_path`` is first
   renamed to a hidden trash name, then the new one renamed in, then the trash deleted. Between
   the two renames the path briefly does not exist; a crash there leaves the old content in the
   ``.trash`` sibling, never a partial directory under the final name.
4) Hidden names start with ``.`` so that listings of ``step_*`` directories never see them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Persist a directory entry change (a rename) where the platform allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows cannot open directories; its renames are already durable
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_replace(path: str | Path) -> Iterator[Path]:
    """A hidden temporary sibling of ``path`` to write (for writers that want a file name, not
    bytes); fsync'ed and renamed over ``path`` when the block succeeds, removed when it fails,
    so readers see the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    with atomic_replace(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """``atomic_write_bytes`` for text."""
    return atomic_write_bytes(path, text.encode(encoding))


def _fsync_tree(root: Path) -> None:
    """fsync every file under ``root`` (library writers such as ``save_pretrained`` do not)."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(dirpath))


@contextmanager
def atomic_dir(final_path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces ``final_path`` as a whole.

    Example::

        with atomic_dir(root / "step_000010") as tmp:
            model.save_pretrained(tmp / "model")
    """
    final = Path(final_path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    trash = None
    if final.exists() or final.is_symlink():
        trash = final.parent / f".{final.name}.trash-{uuid.uuid4().hex[:8]}"
        os.rename(final, trash)
    try:
        os.rename(tmp, final)
    except BaseException:
        if trash is not None:  # put the old content back before reporting the failure
            os.rename(trash, final)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(final.parent)
    if trash is not None:
        if trash.is_dir() and not trash.is_symlink():
            shutil.rmtree(trash, ignore_errors=True)
        else:
            trash.unlink(missing_ok=True)
