"""`python -m finops_devenv.opencost_replay` as the OpenCost stand-in image runs it: listens
where told, answers `/healthz` and the captured allocations, and stops on SIGTERM."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import urllib.request

from finops_devenv import opencost_replay as replay

WINDOW = "2026-10-03T10:00:00Z,2026-10-03T11:00:00Z"


def test_cli_serves_healthz_and_captures_then_stops_on_sigterm(
    opencost_captures_dir: pathlib.Path,
) -> None:
    cmd = [sys.executable, "-m", "finops_devenv.opencost_replay", "--port", "0"]
    cmd += ["--host", "127.0.0.1", "--captures", str(opencost_captures_dir)]
    # The same package this test imported, whatever is installed in the interpreter.
    src = str(pathlib.Path(replay.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("OpenCost replay on http://127.0.0.1:"), line
        url = line.split()[-1]
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as resp:
            assert resp.status == 200
            assert resp.read() == b"ok\n"
        query = f"window={WINDOW}&aggregate=namespace,pod&step=1h"
        with urllib.request.urlopen(f"{url}/allocation/compute?{query}", timeout=5) as resp:
            doc = json.load(resp)
        assert doc["code"] == 200
        (step,) = doc["data"]
        assert step, "captures answered no allocation"
        assert all(a["window"]["start"] == "2026-10-03T10:00:00Z" for a in step.values())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
