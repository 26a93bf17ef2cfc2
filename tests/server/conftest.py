"""Fixtures: real `kestrel serve` processes of ../shared/models/stories260K.gguf on 127.0.0.1."""
import os
import re
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
# KESTREL_SHARED_MODELS comes from CTest (the same folder the C++ tests read).
MODEL = (Path(os.environ.get("KESTREL_SHARED_MODELS", ROOT / ".." / "shared" / "models")) / "stories260K.gguf").resolve()
KESTREL = Path(os.environ.get("KESTREL_BIN", ROOT / "build" / "debug" / "tools" / "kestrel"))
MODEL_NAME = "stories260K"


class Server:
    def __init__(self, *extra_args, model=MODEL):
        self.api_key = None
        args = [str(KESTREL), "serve", str(model), "--host", "127.0.0.1", "--port", "0", "-t", "2",
                "--served-model-name", MODEL_NAME, *extra_args]
        if "--api-key" in extra_args:
            self.api_key = extra_args[extra_args.index("--api-key") + 1]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        self.stderr_lines = []
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.stderr_lines.append(line)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        else:
            raise RuntimeError("server did not start")
        if not hasattr(self, "port"):
            raise RuntimeError("server failed: " + "".join(self.stderr_lines))
        self.base = f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=self.api_key or "none", max_retries=0,
                             timeout=kwargs.pop("timeout", 120), **kwargs)

    def metrics(self):
        text = httpx.get(self.base + "/metrics", timeout=30).text
        values = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{", 1)[0]
            if "_bucket" in name:
                continue
            values[name] = values.get(name, 0.0) + float(value)
        return values

    def wait_idle(self, timeout=60):
        """Waits until no request runs or waits and no KV block is held; returns the metrics."""
        deadline = time.time() + timeout
        m = self.metrics()
        while time.time() < deadline:
            m = self.metrics()
            if (m["kestrel_num_requests_running"] == 0 and m["kestrel_num_requests_waiting"] == 0
                    and m["kestrel_kv_cache_blocks_used"] == 0):
                return m
            time.sleep(0.05)
        raise AssertionError(f"server not idle: {m}")

    def stop(self):
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        rest = self.proc.stderr.read()
        # A sanitizer report on shutdown is a test failure.
        assert "ERROR: AddressSanitizer" not in rest and "runtime error:" not in rest, rest
        assert code == 0, f"server exited with {code}: {rest}"


@pytest.fixture(scope="module")
def server():
    s = Server("--chat-template", "chatml", "--kv-blocks", "512", "--max-num-seqs", "64")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()
