"""What the sync and asyncio clients share: the socket's path, the paths
and bodies of the API's calls, and reading its answers."""
import datetime
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Optional

from .errors import BatonError, LockLost

DEFAULT_SOCKET = "/var/run/baton/baton.sock"


def socket_path(path: Optional[str] = None) -> str:
    """The sidecar's socket as the baton command finds it: path if given,
    else $BATON_SOCKET, else $BATON_SOCKET_PATH, else the pod's socket."""
    return path or os.environ.get("BATON_SOCKET") or os.environ.get("BATON_SOCKET_PATH") or DEFAULT_SOCKET


def lock_path(key: str, action: str = "") -> str:
    return "/v1/locks/" + urllib.parse.quote(key, safe="/") + (":" + action if action else "")


def election_path(name: str, action: str = "") -> str:
    return "/v1/elections/" + urllib.parse.quote(name, safe="/") + (":" + action if action else "")


def claim(
    owner: Optional[str] = None,
    ttl: Optional[str] = None,
    wait: Optional[str] = None,
    max_hold: Optional[str] = None,
    mode: Optional[str] = None,
    limit: Optional[int] = None,
    weight: Optional[int] = None,
    lock_delay: Optional[str] = None,
    once: bool = False,
    if_done: Optional[str] = None,
    if_failed: Optional[str] = None,
    value: Optional[str] = None,
) -> dict[str, Any]:
    """The body of an acquire or a hold: the fields given, as the API names
    them (value is an election's: a lock refuses it, 400 invalid_value)."""
    body = {"owner": owner, "ttl": ttl, "wait": wait, "max_hold": max_hold, "mode": mode, "limit": limit,
            "weight": weight, "lock_delay": lock_delay, "once": once or None, "if_done": if_done,
            "if_failed": if_failed, "value": value}
    return {k: v for k, v in body.items() if v is not None}


def query(**params: Any) -> str:
    q = {k: v for k, v in params.items() if v not in (None, "", False)}
    return "?" + urllib.parse.urlencode(q) if q else ""


def valid_for(event: dict[str, Any]) -> Optional[float]:
    """How many seconds from now the lock stays certainly the holder's on
    the word of event (a granted or heartbeat line): its valid_for_seconds
    counted from its at, when the sidecar sent it, not from when it was
    read (a stalled client reads an old line late). None when the line
    says nothing of it."""
    valid = event.get("valid_for_seconds")
    if valid is None:
        return None
    at = event.get("at")
    if at:
        try:
            sent = datetime.datetime.fromisoformat(at).timestamp()
            return valid - max(0.0, time.time() - sent)
        except ValueError:
            pass
    return valid


def error_of(status: int, data: bytes) -> BatonError:
    """The BatonError of an answer that is not 200."""
    try:
        body = json.loads(data)
        return BatonError(body["code"], body["message"], status, body)
    except (ValueError, KeyError, TypeError):
        return BatonError("unexpected", f"unexpected answer: {data[:200]!r}", status)


class Held:
    """What the plain and asyncio holds share: the key, the stream's
    granted event, and the loss once the lock may be lost (None while
    held)."""

    key: str
    grant: dict[str, Any]
    lost: Optional[LockLost]
    _on_lost: Optional[Callable[[LockLost], None]]
    election: bool = False  # a leadership (lead), not a lock (hold)

    def _stream_path(self) -> str:
        """Where the stream is asked for: a hold's, or a campaign's."""
        return election_path(self.key, "campaign") if self.election else lock_path(self.key, "hold")

    def _let_go_path(self) -> str:
        """Where the lock is released, or the leadership resigned."""
        return (election_path(self.key) if self.election else lock_path(self.key)) + query(owner=self.owner)

    @property
    def fence(self) -> int:
        """The lock's fencing token: pass it to what the work writes."""
        return self.grant["fence"]

    @property
    def owner(self) -> str:
        return self.grant["owner"]

    def _tell_lost(self) -> None:
        """Call on_lost with the loss; an error of it is logged, never
        raised into the client's own work of ending the lock."""
        if self._on_lost is not None and self.lost is not None:
            try:
                self._on_lost(self.lost)
            except Exception:
                logging.getLogger("baton_client").exception("on_lost raised")


def granted(key: str, line: bytes) -> Optional[dict[str, Any]]:
    """The granted event, if line of a hold stream before its grant is
    it; None for a queued or heartbeat line. A refused or error line raises
    its BatonError, and so does the stream's end (an empty line)."""
    if not line:
        raise BatonError("stream_ended", f"lock {key!r}: the sidecar's stream ended before a grant")
    event = json.loads(line)
    if event.get("event") in ("refused", "error"):
        raise refusal(key, event)
    return event if event.get("event") == "granted" else None


def refusal(key: str, event: dict[str, Any]) -> BatonError:
    """The BatonError of a hold stream's refused or error event."""
    code = event.get("code", "unexpected")
    return BatonError(code, event.get("message") or f"lock {key!r} not granted: {code}", 0, event)
