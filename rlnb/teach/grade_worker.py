"""The grader's worker: one student notebook's definitions, checked by rlnb's own checks.

    python -m rlnb.teach.grade_worker < spec.json     # {"code": ..., "calls": [...], "seconds": S}

Run by ``rlnb teach grade`` (``grade.py``) in a fresh process with a time limit, never in the
grader's own: it executes the student's code. ``code`` holds only the notebook's imports,
definitions and call-free assignments (``grade.definitions``), so no live run, no training and
no cell's output is involved; each call is a check call as the built exercise writes it
(``teach.check_gae(gae)``), evaluated with ``teach`` bound to rlnb's checks as they were before
the student's code ran. It prints one ``RESULT`` line: a JSON list with one entry per call.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import sys
import types

RESULT = "RESULT "


class _TimeLimit(BaseException):
    """Past the time limit: a BaseException, so that no check reports it as the student's error."""


def _alarm(signum, frame):
    raise _TimeLimit()


def grade(spec: dict) -> list[dict]:
    """Each call's status (``grade.py``'s module docstring lists them)."""
    import rlnb.teach as teach
    from rlnb.teach.check import CheckFailed
    from rlnb.teach.display import STUB

    trusted = types.SimpleNamespace(**{n: getattr(teach, n) for n in dir(teach)
                                       if n.startswith("check_")})
    namespace: dict = {"__name__": "student_notebook"}
    problem = None
    signal.signal(signal.SIGALRM, _alarm)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            signal.alarm(max(1, int(spec["seconds"])))
            exec(compile(spec["code"], "<the student's notebook>", "exec"), namespace)
    except _TimeLimit:
        problem = f"the notebook's definitions ran past {spec['seconds']} s"
    except BaseException as err:  # a student's import can raise anything
        problem = f"the notebook's definitions raised {type(err).__name__}: {err}"
    finally:
        signal.alarm(0)
    results = []
    for call in spec["calls"]:
        function = call["function"]
        if function not in namespace:
            results.append({"status": "not attempted", "detail": f"no function {function}"
                            + (f" ({problem})" if problem else "")})
            continue
        shown = io.StringIO()
        try:
            with contextlib.redirect_stdout(shown):
                signal.alarm(max(1, int(spec["seconds"])))
                eval(compile(call["call"], "<rlnb's check call>", "eval"),
                     {**namespace, "teach": trusted})
            passed = shown.getvalue().startswith("✓ ")
            results.append({"status": "passed" if passed else "error",
                            "detail": shown.getvalue().strip()[:300]})
        except _TimeLimit:
            results.append({"status": "timed out", "detail": f"over {spec['seconds']} s"})
        except NotImplementedError as err:
            stub = str(err).startswith(STUB)
            results.append({"status": "not attempted" if stub else "error",
                            "detail": f"NotImplementedError: {err}"})
        except CheckFailed as err:
            results.append({"status": f"mistake: {err.mistake}" if err.mistake else "wrong",
                            "mistake": err.mistake or "", "detail": str(err)})
        except BaseException as err:  # whatever the student's code raised
            results.append({"status": "error", "detail": f"{type(err).__name__}: {err}"})
        finally:
            signal.alarm(0)
    return results


def main() -> int:
    spec = json.loads(sys.stdin.read())
    print(RESULT + json.dumps(grade(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
