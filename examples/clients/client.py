"""Hold a Baton lock while a phase runs, with nothing but Python's standard library.

The lock is held as long as the connection stays open: if this process dies,
Baton releases it at once. A second caller gets 409 and the running
execution's id: the webhook pattern.
"""
import http.client
import json
import os
import socket

SOCKET = os.environ.get("BATON_SOCKET", "/var/run/baton/baton.sock")


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None):
        super().__init__("baton", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def run_phase(key, owner):
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
        for line in resp:  # one JSON event a line
            event = json.loads(line)
            if event["event"] == "granted":
                print(f"running {key} with fence {event['fence']}")  # pass the fence to what you write
                return 200, {"execution_id": owner}
            if event["event"] in ("lost", "refused", "error"):
                raise RuntimeError(f"baton: {event['event']}: {event.get('message')}")
    finally:
        conn.close()  # closing the connection releases the lock
        print("released")


status, body = run_phase("flow-123/readiness", "exec-py")
print(status, json.dumps(body, separators=(",", ":")))
