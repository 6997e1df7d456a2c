"""Several processes: the ``accelerate.Accelerator`` a launcher asks for, or None for one process;
and, when a rank dies, which one it was.

    accelerator = auto_accelerator()
    watch = RankWatch(accelerator)        # every rank's host and pid, gathered once
    try:
        with watch.stopped_by_launcher():  # SIGTERM from the launcher becomes an exception
            ...                            # train
    except Exception as err:
        print(watch.blame(err) or err)     # "rank 1 (pid 4242) died first: ..."

Implementation choices:
1) The Accelerator is built only when a launcher started several processes (``WORLD_SIZE`` > 1,
   as under ``accelerate launch``, ``torchrun`` or ``rlnb launch``); on a machine without GPUs it
   is built with ``cpu=True``, else every launched process would be rank 0 of 1.
2) Collectives time out after ``RLNB_DIST_TIMEOUT`` seconds (default 60, torch's is 30
   minutes): when one rank dies, the others fail with a timeout within a minute instead of
   hanging (on one machine sooner: the dead rank's sockets close, and torch's launcher stops
   the other ranks with SIGTERM as soon as one exits).
3) A rank that dies takes no message with it: the survivors only see a closed connection, a
   timeout, or the launcher's SIGTERM. So every rank's host and pid are gathered once at the
   start (one collective), and a survivor names the ranks on its host whose process is gone.
   The first to go is the one torch's launcher reports as the root cause; a survivor names
   every rank that is gone, and no rank when the dead one ran on another host.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time

import torch

# the messages a collective fails with when the rank at the other end went away
PEER_LOST = re.compile(
    r"closed by peer|reset by peer|connection refused|broken pipe|timed out|timeout|"
    r"communicator was aborted|connection closed|Socket Timeout|recv.*failed", re.I)


def auto_accelerator():
    """An ``accelerate.Accelerator`` when a launcher started several processes, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from datetime import timedelta

    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    timeout = timedelta(seconds=float(os.environ.get("RLNB_DIST_TIMEOUT", "60")))
    return Accelerator(cpu=not torch.cuda.is_available(),
                       kwargs_handlers=[InitProcessGroupKwargs(timeout=timeout)])


class LauncherStopped(Exception):
    """The launcher ended this rank (SIGTERM), as torch's launcher does when another rank died."""


class RankWatch:
    """Every rank's ``(host, pid)`` (choice 3), to say which rank died when a collective fails."""

    def __init__(self, accelerator=None):
        self.rank = accelerator.process_index if accelerator is not None else 0
        self.peers: list[tuple[str, int]] = [(socket.gethostname(), os.getpid())]
        if accelerator is not None and accelerator.num_processes > 1:
            import torch.distributed as torch_dist

            self.peers = [None] * accelerator.num_processes
            torch_dist.all_gather_object(self.peers, (socket.gethostname(), os.getpid()))

    def gone(self, wait: float = 2.0) -> list[int]:
        """Ranks on this host whose process no longer runs, in rank order; waits up to ``wait``
        seconds for one (a killed process closes its sockets a moment before it is gone)."""
        host = socket.gethostname()
        deadline = time.monotonic() + wait
        while True:
            gone = [r for r, (h, pid) in enumerate(self.peers)
                    if r != self.rank and h == host and not _running(pid)]
            if gone or time.monotonic() > deadline:
                return gone
            time.sleep(0.1)

    def blame(self, err: BaseException | None = None) -> str | None:
        """One line naming the rank that died, when ``err`` is what a survivor sees (a lost
        connection, a timeout, the launcher's SIGTERM); None when ``err`` is this rank's own."""
        if len(self.peers) == 1:
            return None
        if err is not None and not isinstance(err, LauncherStopped) and not lost_peer(err):
            return None
        gone = self.gone()
        seen = ("the launcher stopped it (SIGTERM)" if isinstance(err, LauncherStopped) else
                f"it lost its connection ({_first_line(err)})" if err is not None else "")
        if not gone:
            return (f"rank {self.rank} stopped because another rank failed ({seen}); the "
                    "launcher's report names it")
        why = []
        for r in gone:
            words = self._last_words(r)
            why.append(f"rank {r} (pid {self.peers[r][1]}) failed first: {words}" if words else
                       f"rank {r} (pid {self.peers[r][1]}) died first: its process ended "
                       "without a Python error (killed by a signal such as SIGKILL or the "
                       "out-of-memory killer, or a crash)")
        return f"{'; '.join(why)}; rank {self.rank} stopped because {seen}"

    def report(self, err: BaseException) -> None:
        """Leave this rank's own error in the process group's store before it exits, so a
        survivor can say why it died (best effort: the store may be gone too)."""
        store = _store() if len(self.peers) > 1 else None
        if store is not None:
            with contextlib.suppress(Exception):
                store.set(f"rlnb/failed/{self.rank}", _first_line(err))

    def _last_words(self, rank: int) -> str | None:
        store = _store()
        key = f"rlnb/failed/{rank}"
        try:
            return store.get(key).decode() if store is not None and store.check([key]) else None
        except Exception:  # the store lived in the dead process
            return None

    @contextlib.contextmanager
    def stopped_by_launcher(self):
        """Turn the launcher's SIGTERM into ``LauncherStopped`` inside the block (several
        processes only; the main thread only, where Python runs signal handlers). When the
        block fails, SIGTERM stays ignored: the rank is ending, and the launcher's SIGTERM
        (sent as soon as the dead rank is seen) must not cut off the line that names it."""
        if len(self.peers) == 1:
            yield
            return

        def stop(signum, frame):
            raise LauncherStopped(f"rank {self.rank} received SIGTERM from the launcher")

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            yield
        except BaseException:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            raise
        signal.signal(signal.SIGTERM, previous)


def _store():
    """The default process group's key-value store (torch's launcher hosts it), or None."""
    import torch.distributed as torch_dist

    if not (torch_dist.is_available() and torch_dist.is_initialized()):
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:  # a private torch function: without it, ranks are named without a reason
        return None


def lost_peer(error: BaseException | str) -> bool:
    """Whether ``error`` (an exception or its one-line text) is a collective failing because
    the rank at the other end went away: raised by torch.distributed or its gloo/NCCL backends
    with a lost-connection or timeout message, not by this rank's own code."""
    import torch.distributed as torch_dist

    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    from_backend = (not isinstance(error, str)
                    and isinstance(error, getattr(torch_dist, "DistError", ()))) or \
        re.search(r"gloo|nccl|ProcessGroup|c10d|DistBackendError|DistNetworkError", text,
                  re.I) is not None
    return from_backend and PEER_LOST.search(text) is not None


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process on this host (a zombie, dead but not yet collected by
    its parent, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: state Z = exited, waiting for the launcher to collect it
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _first_line(err: BaseException) -> str:
    """``Type: first sentence`` of an error (gloo's add advice that says nothing here)."""
    text = (str(err).strip().splitlines() or [""])[0]
    text = text.split(". ", 1)[0]
    return f"{type(err).__name__}: {text[:200]}"
