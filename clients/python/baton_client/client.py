"""The plain (blocking) client: Client, and Hold, a lock held through a
hold stream for as long as a with block runs."""
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

from . import _wire
from ._unix import UnixHTTPConnection
from .errors import SILENT, STREAM_ENDED, BatonError, LockLost, SidecarUnreachable


class Client:
    """A client of the sidecar serving socket (default: as the baton
    command finds it, $BATON_SOCKET or the pod's socket). Every call opens a
    connection of its own, so one Client may serve many threads."""

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None):
        self.socket = _wire.socket_path(socket)
        self.timeout = timeout

    def _open(self, method: str, path: str, body: Optional[dict[str, Any]] = None):
        conn = UnixHTTPConnection(self.socket, timeout=self.timeout)
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None,
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
        except OSError as err:
            conn.close()
            raise SidecarUnreachable(self.socket, err) from err
        if resp.status != 200:
            data = resp.read()
            conn.close()
            raise _wire.error_of(resp.status, data)
        return conn, resp

    def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> Any:
        conn, resp = self._open(method, path, body)
        try:
            return json.loads(resp.read())
        finally:
            conn.close()

    def acquire(self, key: str, **claim: Any) -> dict[str, Any]:
        """Take key (POST /v1/locks/KEY) and return the grant: fence, owner,
        expires_at. claim: owner, ttl, wait, mode, limit, weight,
        lock_delay, once, if_done, if_failed, as docs/api.md names them.
        The lock lives until release, its ttl, or the sidecar's end."""
        return self._call("POST", _wire.lock_path(key), _wire.claim(**claim))

    def release(self, key: str, owner: str) -> dict[str, Any]:
        """Release owner's lock of key."""
        return self._call("DELETE", _wire.lock_path(key) + _wire.query(owner=owner))

    def extend(self, key: str, owner: str, ttl: Optional[str] = None) -> dict[str, Any]:
        """Move owner's lock's deadline to ttl from now."""
        return self._call("POST", _wire.lock_path(key, "extend"), _wire.claim(owner=owner, ttl=ttl))

    def done(self, key: str, owner: str, ok: bool, result: Optional[str] = None) -> dict[str, Any]:
        """Record a run-once holder's outcome and release the lock."""
        body: dict[str, Any] = {"owner": owner, "ok": ok}
        if result is not None:
            body["result"] = result
        return self._call("POST", _wire.lock_path(key, "done"), body)

    def status(self, key: str) -> dict[str, Any]:
        """One lock's status: held, holder, fence, waiters..."""
        return self._call("GET", _wire.lock_path(key))

    def list(self, prefix: str = "") -> list[dict[str, Any]]:
        """The locks whose key starts with prefix."""
        return self._call("GET", "/v1/locks" + _wire.query(prefix=prefix))["locks"]

    def force_release(self, key: str, fence: Optional[int] = None, by: Optional[str] = None) -> dict[str, Any]:
        """Free key whoever holds it (the lock policy must allow it)."""
        return self._call("DELETE", _wire.lock_path(key) + _wire.query(force="true", fence=fence, by=by))

    def hold(self, key: str, on_lost: Optional[Callable[[LockLost], None]] = None, **claim: Any) -> "Hold":
        """A lock held through a hold stream, as a context manager:

            with client.hold("nightly", owner="exec-1", wait="1m") as lock:
                for step in steps:
                    lock.check()          # raises LockLost once the lock may be lost
                    step(lock.fence)

        The sidecar renews the lock while the stream is open. on_lost, if
        given, is called (from another thread) as soon as the lock may be
        lost, so that the work can be stopped; the with block then raises
        LockLost when it ends, even if it ended without error."""
        return Hold(self, key, _wire.claim(**claim), on_lost)

    def lead(self, name: str, on_lost: Optional[Callable[[LockLost], None]] = None, **claim: Any) -> "Hold":
        """Campaign in election name, as long as it takes unless wait says
        otherwise, and lead for as long as the with block runs, as hold
        does for a lock: claim takes owner, value (what the leader
        announces), wait, ttl, max_hold, lock_delay. Ending the block
        resigns."""
        h = Hold(self, name, _wire.claim(**claim), on_lost)
        h.election = True
        return h

    def leader(self, name: str) -> dict[str, Any]:
        """Who leads election name: a status whose holder is the leader
        (with its value) when held, and fence its fence."""
        return self._call("GET", _wire.election_path(name))

    def proclaim(self, name: str, owner: str, value: str) -> dict[str, Any]:
        """The leader (owner) announces value instead; its fence stays."""
        return self._call("POST", _wire.election_path(name, "proclaim"), {"owner": owner, "value": value})

    def resign(self, name: str, owner: str) -> dict[str, Any]:
        """End owner's leadership of election name, or its candidacy."""
        return self._call("DELETE", _wire.election_path(name) + _wire.query(owner=owner))

    def observe(self, name: Optional[str] = None, prefix: str = "") -> Iterator[dict[str, Any]]:
        """Follow election name, or every election under prefix: its state,
        then each new leader (granted), each end, each value proclaimed;
        never a leader older than one told."""
        return self._events(_wire.election_path(name, "observe") if name else "/v1/elections:observe" + _wire.query(prefix=prefix))

    def watch(self, key: Optional[str] = None, prefix: str = "") -> Iterator[dict[str, Any]]:
        """Follow a lock, or every lock under prefix: its state, then each
        change, one event at a time (docs/api.md, watching locks)."""
        return self._events(_wire.lock_path(key, "watch") if key else "/v1/locks:watch" + _wire.query(prefix=prefix))

    def _events(self, path: str) -> Iterator[dict[str, Any]]:
        """The events of a watch at path, one at a time."""
        conn, resp = self._open("GET", path)
        try:
            for line in resp:
                yield json.loads(line)
        finally:
            conn.close()


class Hold(_wire.Held):
    """A lock held through a hold stream (Client.hold). fence, owner and
    grant are set once granted; lost is None while the lock is held."""

    def __init__(self, client: Client, key: str, body: dict[str, Any], on_lost: Optional[Callable[[LockLost], None]]):
        self._client, self.key, self._body, self._on_lost = client, key, body, on_lost
        self.grant: dict[str, Any] = {}
        self.lost: Optional[LockLost] = None
        self._mu = threading.Lock()
        self._released = False  # a released line was read
        self._delete_sent = False
        self._ended = threading.Event()  # the stream is read no more
        self._until = float("inf")
        self._conn = None
        self._resp = None
        self._reader: Optional[threading.Thread] = None

    def __enter__(self) -> "Hold":
        self._conn, resp = self._client._open("POST", self._stream_path(), self._body)
        try:
            while (event := _wire.granted(self.key, resp.readline())) is None:
                pass
        except BaseException:
            resp.close()
            self._conn.close()
            raise
        if self._conn.sock is not None:  # the client's timeout is for calls, not for a stream's silences
            self._conn.sock.settimeout(None)
        self.grant, self._resp = event, resp
        self._note(event)
        self._reader = threading.Thread(target=self._follow, args=(resp,), daemon=True, name=f"baton-hold-{self.key}")
        self._reader.start()
        threading.Thread(target=self._watch_silence, daemon=True, name=f"baton-silence-{self.key}").start()
        return self

    def _note(self, event: dict[str, Any]) -> None:
        left = _wire.valid_for(event)
        if left is not None:
            self._until = time.monotonic() + left

    def _follow(self, resp) -> None:
        """Read the stream until the lock ends."""
        try:
            while True:
                line = resp.readline()
                if not line:
                    self._end(STREAM_ENDED, "the sidecar's stream ended without a last line")
                    return
                event = json.loads(line)
                if event.get("event") == "released":
                    with self._mu:
                        mine = self._delete_sent
                        self._released = mine and self.lost is None
                    if not mine:  # another caller of the same owner let it go: the work must stop
                        self._end("released", "released by another caller with its owner")
                    return
                if event.get("event") == "lost":
                    self._end(event.get("reason", "lost"), event.get("message", ""))
                    return
                self._note(event)
        except Exception as err:  # a broken chunk, a bad line: the stream is over
            self._end(STREAM_ENDED, f"the sidecar's stream broke: {err!r}")
        finally:
            self._ended.set()

    def _watch_silence(self) -> None:
        """End the lock once nothing was heard past valid_for_seconds."""
        while not self._ended.wait(max(self._until - time.monotonic(), 0) if self._until != float("inf") else None):
            if time.monotonic() >= self._until:
                self._end(SILENT, "nothing heard from the sidecar within the lock's valid_for_seconds")
                return

    def _end(self, reason: str, message: str) -> None:
        """The lock may be lost: say why, hang up, and tell on_lost."""
        with self._mu:
            if self.lost is not None or self._released:
                return
            self.lost = LockLost(self.key, self.grant.get("fence", 0), reason, message)
        self._close()
        self._tell_lost()

    def held(self) -> bool:
        """Whether the lock is still certainly this caller's."""
        if self.lost is None and not self._released and time.monotonic() >= self._until:
            self._end(SILENT, "nothing heard from the sidecar within the lock's valid_for_seconds")
        return self.lost is None

    def check(self) -> None:
        """Raise LockLost if the lock may be lost: call it before each step that writes."""
        if not self.held():
            raise self.lost  # type: ignore[misc]

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[LockLost]:
        """Block until the lock ends (or timeout); the loss, or None."""
        self._ended.wait(timeout)
        self.held()
        return self.lost

    def release(self) -> None:
        """Release the lock (one DELETE, however often called) and close
        the stream. A lock that is gone (lost, or taken from its owner)
        is recorded in lost rather than raised."""
        with self._mu:
            send = not self._delete_sent and self.lost is None and not self._released
            self._delete_sent = True
        try:
            if send:
                try:
                    self._client._call("DELETE", self._let_go_path())
                except BatonError as err:  # not released by this DELETE: the lock is not ours
                    self._end(err.body.get("reason") or err.code, err.message)
                else:
                    self._ended.wait(10)
        finally:
            self._close()
            if self._reader is not None:
                self._reader.join(10)

    def _close(self) -> None:
        conn, resp = self._conn, self._resp
        sock = conn.sock if conn is not None else None
        if sock is not None:  # wakes the reader blocked on it
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if resp is not None:
            resp.close()
        if conn is not None:
            conn.close()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.release()
        if self.lost is not None and exc_type is None:
            raise self.lost
        return False
