"""Run one phase under a Baton lock, with nothing but Python's standard library."""
import http.client
import json
import os
import socket

SOCKET = os.environ.get("BATON_SOCKET", "/var/run/baton/baton.sock")


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("baton", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def call(method, path, body=None):
    conn = UnixHTTPConnection(SOCKET)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


key, owner = "flow-123/readiness", "exec-py"
status, lock = call("POST", f"/v1/locks/{key}", {"owner": owner, "ttl": "10m", "wait": "30s"})
if status == 200:
    try:
        print(f"running {key} with fence {lock['fence']}")  # pass the fence to what you write
    finally:
        status, rel = call("DELETE", f"/v1/locks/{key}?owner={owner}")
        print("released" if status == 200 else f"release: {rel['code']}: {rel['message']}")
elif status == 409:
    print(f"already running: {lock['holder']['owner']} ({lock['message']})")
else:
    raise SystemExit(f"baton: {status} {lock['code']}: {lock['message']}")
