"""Drishti's verdicts on a Darshan log (``drishti-io``, the ``[analysis]`` extra), as rows.

Drishti has no structured output (its ``--csv`` holds codes only, not levels or numbers)
and parses its command line at import into module state, so each log is analysed in a
child Python of its own: it runs Drishti's Darshan handler as ``drishti --code LOG`` would,
keeps the console report out, and prints as JSON the insights Drishti collected. Each
insight's level is the colour Drishti's ``message()`` gives it (red HIGH, orange1 WARN,
green OK, none INFO). A log Drishti fails on, or runs past the timeout on, is one line;
a Python without drishti-io is one line too (:class:`DrishtiMissing`).
"""

import json
import subprocess
import sys
import tempfile

from ..errors import HpcioError

__all__ = ["verdicts", "DrishtiMissing", "LEVELS", "TIMEOUT_S"]

LEVELS = ("HIGH", "WARN", "INFO", "OK")  # Drishti's, most severe first
TIMEOUT_S = 300  # Drishti asks sacct for the job's nodes on MPI-IO logs: allow for it

_CHILD = r"""
import contextlib, io, json, re, sys
log = sys.argv[1]
sys.argv = ["drishti", "--code", log]
try:
    from drishti.includes import module
    from drishti.handlers.handle_darshan import handler
    from importlib.metadata import version
    from rich.text import Text
except ModuleNotFoundError as e:
    print(json.dumps({"missing": e.name})); sys.exit()
said = io.StringIO()
try:
    with contextlib.redirect_stdout(said):
        handler()
except SystemExit as e:
    last = [": " + ln.strip() for ln in said.getvalue().splitlines() if ln.strip()][-1:]
    print(json.dumps({"error": f"drishti exited {e.code}" + "".join(last)}))
    sys.exit()
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"})); sys.exit()
LEVEL = {"red": "HIGH", "orange1": "WARN", "green": "OK", "": "INFO"}
def plain(s):
    return Text.from_markup(s).plain.strip()
rows = []
for g in module.insights_metadata + module.insights_operation + module.insights_dxt:
    head, *rest = [r for r in g.renderables if isinstance(r, str)]
    m = re.match(r"(?:\[(\w+)\])?:arrow_forward: \[(\w+)\] (.*)", head, re.S)
    row = {"level": LEVEL.get(m.group(1) or "", m.group(1)), "code": m.group(2),
           "message": plain(m.group(3)), "details": [], "recommendations": []}
    into = row["details"]
    for r in rest:
        text = plain(r.replace(":left_arrow_curving_right:", ""))
        if text == "Recommendations:":
            into = row["recommendations"]
        elif text:
            into.append(text)
    rows.append(row)
print(json.dumps({"version": version("drishti-io"), "verdicts": rows}))
"""


class DrishtiMissing(HpcioError):
    """The Python that runs Drishti has no drishti-io (or no PyDarshan)."""


def verdicts(log_path, python=None, timeout=TIMEOUT_S):
    """(Drishti's version, [{level, code, message, details, recommendations}]) on the log,
    in Drishti's order; raises :class:`DrishtiMissing` or HpcioError (one line naming the
    log). ``python``: the interpreter whose drishti-io runs, by default this one. It runs
    in a temporary directory: whatever Drishti might write goes nowhere else."""
    cmd = [python or sys.executable, "-c", _CHILD, log_path]
    with tempfile.TemporaryDirectory(prefix="hpcio-drishti-") as tmp:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HpcioError(f"Drishti on {log_path}: still running after {timeout:g} s; "
                             f"stopped") from None
        except OSError as e:
            raise HpcioError(f"Drishti on {log_path}: cannot start {cmd[0]}: "
                             f"{e.strerror}") from None
    lines = p.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1])
    except (IndexError, ValueError):
        why = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        raise HpcioError(f"Drishti on {log_path}: failed ({why})") from None
    if "missing" in doc:
        raise DrishtiMissing(f"Drishti not run: {cmd[0]} has no module {doc['missing']} "
                             f"(pip install 'hpcio[analysis]' installs drishti-io)")
    if "error" in doc:
        raise HpcioError(f"Drishti on {log_path}: failed ({doc['error']})")
    return doc["version"], doc["verdicts"]
