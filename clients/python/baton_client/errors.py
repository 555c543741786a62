"""The errors of Baton's socket API, as exceptions that carry its code."""
from typing import Any, Optional


class BatonError(Exception):
    """An error answer of the sidecar: its code (one of the API's, in
    docs/api.md's error table) and a message a person can act on.

    status is the answer's HTTP status, 0 when the refusal came as a
    hold stream's refused or error event (after the stream's 200). body
    is the whole error body: holder, fence, retry_at, run... as the code
    has them.
    """

    def __init__(self, code: str, message: str, status: int = 0, body: Optional[dict[str, Any]] = None):
        super().__init__(f"{message} ({status} {code})" if status else f"{message} ({code})")
        self.code = code
        self.message = message
        self.status = status
        self.body: dict[str, Any] = body or {}

    @property
    def holder(self) -> Optional[dict[str, Any]]:
        """Who holds the lock, on a refusal (already_running, wait_timeout, lock_delayed)."""
        return self.body.get("holder")

    @property
    def fence(self) -> Optional[int]:
        return self.body.get("fence")


class SidecarUnreachable(BatonError):
    """The sidecar's socket could not be reached: the message names it."""

    def __init__(self, socket_path: str, err: BaseException):
        super().__init__(
            "unreachable",
            f"cannot reach the Baton sidecar at {socket_path} (set BATON_SOCKET to its socket): {err}",
        )
        self.socket_path = socket_path


class LockLost(BatonError):
    """A held lock ended without its holder's release: the work done under
    it must stop, another holder may have the lock already.

    reason is the API's lost reason (expired, lease_lost, force_released,
    shutdown, max_hold, etcd_rewound), or stream_ended (the stream ended
    without a last line: the sidecar stopped or crashed, the connection
    broke) or silent (nothing heard from the sidecar past the lock's
    valid_for_seconds: it froze, or lost etcd).
    """

    def __init__(self, key: str, fence: int, reason: str, message: str):
        super().__init__("lock_lost", f"lock {key!r} (fence {fence}) lost: {reason}: {message}", body={"reason": reason})
        self.key = key
        self.fence_lost = fence
        self.reason = reason


STREAM_ENDED = "stream_ended"
SILENT = "silent"

# The API's error codes (docs/api.md).
ALREADY_RUNNING = "already_running"
WAIT_TIMEOUT = "wait_timeout"
LOCK_DELAYED = "lock_delayed"
ALREADY_DONE = "already_done"
LOCK_LOST = "lock_lost"
NOT_HELD = "not_held"
NOT_OWNER = "not_owner"
UNAVAILABLE = "unavailable"
FORBIDDEN = "forbidden"
LIMIT_MISMATCH = "limit_mismatch"
