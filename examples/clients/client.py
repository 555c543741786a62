"""Hold a Baton lock while a phase runs, with nothing but Python's standard library.

The lock is held as long as the connection stays open: if this process dies,
Baton releases it at once. A second caller gets 409 and the running
execution's id: the webhook pattern. While the work runs, a thread reads the
stream: a "lost" line, the stream's end without a last line (the sidecar
crashed) and silence past "valid_for_seconds" (the sidecar froze) all mean
the lock may be someone else's, and the work must stop.
"""
import http.client
import json
import os
import socket
import threading
import time

SOCKET = os.environ.get("BATON_SOCKET", "/var/run/baton/baton.sock")


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None):
        super().__init__("baton", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


class Held:
    """Follows a granted hold stream: held() is False once the lock may be lost."""

    def __init__(self, resp, granted):
        self.until = time.monotonic() + granted["valid_for_seconds"]
        self.lost = None
        threading.Thread(target=self._read, args=(resp,), daemon=True).start()

    def _read(self, resp):
        try:
            for line in resp:
                event = json.loads(line)
                if event["event"] in ("lost", "released"):
                    self.lost = event.get("message", event["event"])
                    return
                if "valid_for_seconds" in event:
                    self.until = time.monotonic() + event["valid_for_seconds"]
        except (OSError, ValueError):
            pass
        self.lost = self.lost or "the stream ended without a last line: the sidecar stopped"

    def held(self):
        return self.lost is None and time.monotonic() < self.until


def run_phase(key, owner, steps):
    conn = UnixHTTPConnection(SOCKET)
    try:
        conn.request("POST", f"/v1/locks/{key}:hold", json.dumps({"owner": owner, "ttl": "10m"}),
                     {"Content-Type": "application/json"})
    except OSError as err:
        raise SystemExit(f"baton: cannot reach the sidecar at {SOCKET} (set BATON_SOCKET): {err}")
    resp = conn.getresponse()
    if resp.status == 409:  # webhook pattern: answer 409 with the running execution's id
        running = json.loads(resp.read())["holder"]["owner"]
        conn.close()
        return 409, {"error": "already running", "running_execution_id": running}
    if resp.status != 200:
        err = json.loads(resp.read())
        conn.close()
        raise RuntimeError(f"baton: {resp.status} {err['code']}: {err['message']}")
    try:
        event = json.loads(resp.readline())  # one JSON event a line
        if event["event"] != "granted":
            raise RuntimeError(f"baton: {event['event']}: {event.get('message')}")
        print(f"running {key} with fence {event['fence']}")  # pass the fence to what you write
        lock = Held(resp, event)
        for step in steps:
            if not lock.held():  # check before each step that writes
                raise RuntimeError(f"baton: lock lost, work stopped: {lock.lost or 'no word from the sidecar in time'}")
            step(event["fence"])
        return 200, {"execution_id": owner}
    finally:
        conn.close()  # closing the connection releases the lock
        print("released")


status, body = run_phase("flow-123/readiness", "exec-py", [lambda fence: time.sleep(0.1)] * 3)
print(status, json.dumps(body, separators=(",", ":")))
