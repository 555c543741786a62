"""HTTP over the sidecar's unix socket with http.client."""
import http.client
import socket


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to the sidecar's unix socket."""

    def __init__(self, path: str, timeout: float | None = None):
        super().__init__("baton", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock
