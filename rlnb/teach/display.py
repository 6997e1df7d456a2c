"""How a check's failure and an unfilled stub look in a notebook: the student's frames only.

    show_check_failures()   # installed when ``rlnb.teach`` is imported in IPython

1) A ``CheckFailed`` is shown with the frames of the notebook's and the student's code only:
   rlnb's own frames (the check's machinery) are dropped from the traceback, so the message
   sits right under the cell line that called the check.
2) An unfilled stub (``NotImplementedError("implement this: ...")``, what ``rlnb teach build``
   writes in place of a solution) is one line naming the function to write and what to write,
   whichever frames it was raised under; any other ``NotImplementedError`` is shown as usual.
Nothing is imported: without IPython, ``show_check_failures`` does nothing.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from rlnb.teach.check import CheckFailed

STUB = "implement this: "  # how every stub's message starts (rlnb.teach.build)


def show_check_failures(shell=None) -> bool:
    """Install the notebook display of choices 1 and 2 in IPython's shell ``shell`` (default:
    the running one). Returns whether a shell was found."""
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False

    def handler(shell, etype, value, tb, tb_offset=None):
        if issubclass(etype, NotImplementedError) and str(value).startswith(STUB):
            function = stub_function(tb)
            value = etype(f"{value}" + (f" (in {function}: write your code in place of the "
                                        "raise line)" if function else ""))
            # the exception's own line, no header: IPython's (and ipykernel's) display hook,
            # which also records the cell as failed
            shell._showtraceback(etype, value, shell.InteractiveTB.get_exception_only(etype, value))
            return
        shell.showtraceback((etype, value, without_library_frames(tb)), tb_offset=tb_offset)

    shell.set_custom_exc((CheckFailed, NotImplementedError), handler)
    return True


def stub_function(tb) -> str | None:
    """The name of the function whose line raised (the innermost frame), or None."""
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    name = last.tb_frame.f_code.co_name if last is not None else None
    return None if name in (None, "<module>") else name


def without_library_frames(tb):
    """The traceback ``tb`` without the frames of rlnb's own files (a new chain)."""
    library = str(Path(__file__).resolve().parents[1])  # the rlnb package
    kept = []
    while tb is not None:
        if not str(Path(tb.tb_frame.f_code.co_filename).resolve()).startswith(library):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(kept):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new
