"""The HTTP layer under hostile and odd clients, over real sockets: slow and partial heads, pipelining,
broken lengths, wrong methods, a taken port, and shutdown with a deadline. Every wait is bounded."""
import json
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import KESTREL, MODEL, MODEL_NAME, Server


def raw(server, data, timeout=10):
    """Sends bytes on a fresh connection; returns everything the server sends before it closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def status_of(response_bytes):
    return int(response_bytes.split(b" ", 2)[1])


def count_closed(conns, wait):
    """How many of the sockets the server has closed (each given `wait` seconds to show it)."""
    closed = 0
    for c in conns:
        c.settimeout(wait)
        try:
            closed += c.recv(1024) == b""
        except socket.timeout:
            pass
        except OSError:
            closed += 1
    return closed


def health_latencies(server, count, pause=0.1):
    """Seconds each of `count` fresh-connection /health probes took (a probe that fails counts as inf)."""
    out = []
    for _ in range(count):
        start = time.monotonic()
        try:
            r = httpx.get(server.base + "/health", timeout=5)
            out.append(time.monotonic() - start if r.status_code == 200 else float("inf"))
        except httpx.HTTPError:
            out.append(float("inf"))
        time.sleep(pause)
    return out


@pytest.fixture(scope="module")
def hardened():
    s = Server("--head-timeout", "3", "--keep-alive-timeout", "2")
    yield s
    s.stop()


def test_health_answers_during_a_slowloris_flood(hardened):
    """500 connections that each send one header line every second: /health stays within 1 s, and
    the droppers are cut off at the head deadline (3 s), not served forever."""
    conns = []
    for _ in range(500):
        c = socket.create_connection(("127.0.0.1", hardened.port), timeout=5)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        conns.append(c)
    stop = threading.Event()

    def drip():
        n = 0
        while not stop.is_set():
            for c in conns:
                try:
                    c.sendall(b"X-Drip-%d: 1\r\n" % n)
                except OSError:
                    pass
            n += 1
            stop.wait(1.0)

    dripper = threading.Thread(target=drip)
    dripper.start()
    try:
        latencies = health_latencies(hardened, 15)
        assert max(latencies) <= 1.0, latencies
        # The head deadline is 3 s for the whole head: by 6 s every dripping connection is closed.
        time.sleep(3.5)
        closed = count_closed(conns, 0.01)
        assert closed == len(conns), f"{len(conns) - closed} slow connections still open"
    finally:
        stop.set()
        dripper.join()
        for c in conns:
            c.close()
    assert httpx.get(hardened.base + "/health", timeout=5).status_code == 200


def test_health_answers_during_a_partial_head_flood(hardened):
    conns = []
    try:
        for _ in range(200):
            c = socket.create_connection(("127.0.0.1", hardened.port), timeout=5)
            c.sendall(b"GET /health HTTP/1.1\r\nHo")
            conns.append(c)
        latencies = health_latencies(hardened, 10)
        assert max(latencies) <= 1.0, latencies
    finally:
        for c in conns:
            c.close()


def test_connection_cap_makes_room_for_new_clients():
    """At the per-client cap the oldest idle connection is closed for the newcomer."""
    s = Server("--max-connections-per-client", "20")
    conns = []
    try:
        for _ in range(40):
            conns.append(socket.create_connection(("127.0.0.1", s.port), timeout=5))
        time.sleep(0.3)
        assert httpx.get(s.base + "/health", timeout=2).status_code == 200
        closed = count_closed(conns, 0.5)
        assert closed >= 20, closed
    finally:
        for c in conns:
            c.close()
        s.stop()


def test_pipelined_requests_are_all_answered_in_order(server):
    body = json.dumps({"prompt": "Once", "max_tokens": 2, "temperature": 0}).encode()
    post = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    get = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    out = raw(server, post + get + last)
    assert out.count(b"HTTP/1.1 200") == 3, out
    first, second, third = out.index(b"text_completion"), out.index(b'"object":"list"'), out.index(b'"status":"ok"')
    assert first < second < third


def test_broken_lengths_get_answers_not_silence(server):
    # No length on a POST: a prompt 411, not a 30 s wait.
    start = time.monotonic()
    out = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(out) == 411 and time.monotonic() - start < 5
    assert b'"code":"length_required"' in out
    out = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
    assert status_of(out) == 400
    out = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n")
    assert status_of(out) == 400
    out = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n")
    assert status_of(out) == 413
    # A chunked body is read as one.
    body = json.dumps({"prompt": "Once", "max_tokens": 1}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7)) + b"0\r\n\r\n"
    out = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      b"Connection: close\r\n\r\n" + chunked)
    assert status_of(out) == 200 and b"text_completion" in out
    assert httpx.get(server.base + "/health").status_code == 200


def test_wrong_method_is_405_with_allow(server):
    r = httpx.get(server.base + "/v1/completions")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert r.json()["error"]["code"] == "method_not_allowed"
    r = httpx.delete(server.base + "/v1/models")
    assert r.status_code == 405 and r.headers["allow"] == "GET"


def test_a_taken_port_is_a_clear_error(server):
    proc = subprocess.run([str(KESTREL), "serve", str(MODEL), "--host", "127.0.0.1", "--port", str(server.port)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "in use" in proc.stderr, proc.stderr
    # The first server still answers every request (no second listener took a share).
    for _ in range(10):
        assert httpx.get(server.base + "/v1/models").json()["data"][0]["id"] == MODEL_NAME


def test_a_bad_host_is_a_clear_error():
    proc = subprocess.run([str(KESTREL), "serve", str(MODEL), "--host", "300.1.1.1", "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "300.1.1.1" in proc.stderr, proc.stderr


def test_ipv6_loopback_where_the_host_has_it():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    proc = subprocess.Popen([str(KESTREL), "serve", str(MODEL), "--host", "::1", "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.time() + 60
        while "serving" not in line and time.time() < deadline:
            line = proc.stderr.readline()
        port = int(line.rsplit(":", 1)[1].split()[0])
        assert httpx.get(f"http://[::1]:{port}/health", timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def open_streams(server, count, max_tokens=100000):
    """Starts `count` endless streams; returns their threads and what each received."""
    received = [[] for _ in range(count)]
    started = threading.Barrier(count + 1, timeout=120)

    def run(i):
        body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
        try:
            with httpx.stream("POST", server.base + "/v1/completions", json=body, timeout=60) as r:
                first = True
                for line in r.iter_lines():
                    if line:
                        received[i].append(line)
                        if first:
                            first = False
                            started.wait()
        except httpx.HTTPError as e:
            received[i].append(f"exception {e!r}")
        finally:
            if len(received[i]) <= 1:
                try:
                    started.wait()
                except threading.BrokenBarrierError:
                    pass

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    started.wait()
    return threads, received


def test_shutdown_ends_running_streams_within_the_deadline():
    # Streaming mode (a rolling window): a request may run far past the context, so the streams
    # are still going when the signal comes.
    s = Server("--shutdown-timeout", "2", "--attention-sinks", "4", "--max-num-seqs", "32")
    threads, received = open_streams(s, 32)
    start = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    code = s.proc.wait(timeout=30)
    took = time.monotonic() - start
    for t in threads:
        t.join(timeout=10)
    assert code == 0
    assert took <= 2 + 2, took
    for lines in received:
        # Each stream ended with an error event saying why, then [DONE].
        assert lines[-1] == "data: [DONE]", lines[-3:]
        assert "server_shutting_down" in lines[-2], lines[-3:]


def test_a_second_signal_ends_requests_at_once():
    s = Server("--shutdown-timeout", "600", "--attention-sinks", "4")
    threads, received = open_streams(s, 4)
    waiting = {}

    def wait_whole():
        r = httpx.post(s.base + "/v1/completions", timeout=60,
                       json={"prompt": "Once", "max_tokens": 100000, "ignore_eos": True})
        waiting["status"], waiting["retry"] = r.status_code, r.headers.get("retry-after")

    whole = threading.Thread(target=wait_whole)
    whole.start()
    time.sleep(0.5)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert s.proc.poll() is None  # still draining: the grace period is long
    # No new connections while draining.
    with pytest.raises(httpx.ConnectError):
        httpx.get(s.base + "/health", timeout=2)
    start = time.monotonic()
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(timeout=30) == 0
    assert time.monotonic() - start < 4
    whole.join(timeout=10)
    for t in threads:
        t.join(timeout=10)
    assert waiting == {"status": 503, "retry": "1"}, waiting
    assert all("server_shutting_down" in lines[-2] for lines in received)


@pytest.mark.parametrize("option, value", [
    ("--shutdown-timeout", "nan"), ("--shutdown-timeout", "-1"), ("--head-timeout", "0"),
    ("--max-connections", "0"), ("--max-body-bytes", "-5"), ("--port", "70000"),
    ("--max-connections-per-client", "99999999999999999999"),
])
def test_bad_serve_options_are_one_clear_line(option, value):
    proc = subprocess.run([str(KESTREL), "serve", str(MODEL), option, value], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], proc.stderr
