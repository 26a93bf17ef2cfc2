"""Fail-stop of `kestrel serve` split over two ranks under mpirun (issue 17): a rank killed in the
middle of a decode, or stopped (SIGSTOP) so that it never answers, ends the requests in flight with
an error (a 5xx for a whole response, an error event and [DONE] for a stream) instead of a hang,
/health stops answering 200, and every rank exits non-zero within seconds."""
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

BIN = os.environ.get("KESTREL_BIN", str(Path(__file__).resolve().parents[2] / "build/debug/tools/kestrel"))
MODELS = Path(os.environ.get("KESTREL_SHARED_MODELS", Path(__file__).resolve().parents[3] / "shared/models"))
MODEL = str(MODELS / "stories260K.gguf")

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing: scripts/setup.sh installs Open MPI")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_pid(parent, rank):
    """The pid of `kestrel` rank `rank` among mpirun's children."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if b"kestrel" in cmd and ppid == parent and f"OMPI_COMM_WORLD_RANK={rank}\0".encode() in env:
            return int(pid)
    raise AssertionError(f"no rank {rank} under mpirun {parent}")


def start_group(port, *extra):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", ASAN_OPTIONS="detect_leaks=0")
    proc = subprocess.Popen(
        ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "-x", "ASAN_OPTIONS",
         BIN, "serve", MODEL, "--port", str(port), "--tp", "2", "-t", "1", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("the group did not come up: " + proc.communicate()[0][-2000:])


def break_group_in_flight(sig, extra, deadline_s):
    port = free_port()
    proc = start_group(port, *extra)
    try:
        base = f"http://127.0.0.1:{port}"
        body = {"prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True}
        whole = {}

        def whole_request():
            r = httpx.post(base + "/v1/completions", json=body, timeout=60)
            whole["status"], whole["body"], whole["t"] = r.status_code, r.text, time.time()

        t = threading.Thread(target=whole_request)
        t.start()
        events = []
        with httpx.stream("POST", base + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
            assert r.status_code == 200
            broke = None
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                if broke is None and len(events) >= 3:
                    broke = time.time()
                    os.kill(rank_pid(proc.pid, 1), sig)
            stream_end = time.time()
        t.join(timeout=30)
        # The stream ended with an error naming what happened, then [DONE]; the whole response is a 5xx.
        assert events[-1] == "[DONE]", events[-3:]
        error = json.loads(events[-2])["error"]
        assert stream_end - broke < deadline_s, stream_end - broke
        assert whole.get("status", 0) >= 500, whole
        assert whole["t"] - broke < deadline_s
        # Every rank ends, non-zero, within seconds; /health no longer says ok.
        rc = proc.wait(timeout=deadline_s + 5)
        assert rc != 0
        assert time.time() - broke < deadline_s + 5
        with pytest.raises(httpx.HTTPError):
            httpx.get(base + "/health", timeout=1)
        return error["message"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_killed_rank_fails_requests_and_ends_the_group():
    message = break_group_in_flight(signal.SIGKILL, [], deadline_s=5)
    assert "rank 1 of the group" in message and "has died" in message


def test_stopped_rank_trips_the_collective_watchdog():
    message = break_group_in_flight(signal.SIGSTOP, ["--collective-timeout", "3"], deadline_s=8)
    assert "no answer from the other ranks for 3 s" in message
