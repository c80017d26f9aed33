"""A server process on 127.0.0.1 for the comparison scripts: started in its own session with its
log in a temporary file, waited for until an HTTP path answers 200, stopped with its children."""

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

READY_TIMEOUT_S = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process on 127.0.0.1, its log in a temporary file, stopped on exit."""

    def __init__(self, name, argv, port, env=None):
        self.name, self.port = name, port
        self.log = tempfile.NamedTemporaryFile(prefix=f"compare-{name}-", suffix=".log",
                                               delete=False)
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)

    def wait_ready(self, path):
        deadline = time.time() + READY_TIMEOUT_S
        while time.time() < deadline:
            if self.process.poll() is not None:
                how = f"exited with status {self.process.returncode}"
                if self.process.returncode == -signal.SIGILL:
                    how = "died of SIGILL: its build uses instructions this CPU lacks"
                raise SystemExit(f"compare: {self.name} {how}; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        raise SystemExit(f"compare: {self.name} not ready after {READY_TIMEOUT_S} s")

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        os.unlink(self.log.name)
