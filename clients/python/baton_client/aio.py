"""The asyncio client: AsyncClient, and AsyncHold, a lock held through a
hold stream for as long as an async with block runs; the task running the
block is cancelled the moment the lock may be lost."""
import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Optional

from . import _wire
from .errors import SILENT, STREAM_ENDED, BatonError, LockLost, SidecarUnreachable


class _Answer:
    """An HTTP/1.1 answer read from the socket: status, then the body's
    lines (chunked, or up to Content-Length, or up to the close)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, headers: dict[str, str]):
        self.reader, self.writer, self.status, self.headers = reader, writer, status, headers
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        self._left = int(headers["content-length"]) if "content-length" in headers else None
        self._buf = b""
        self._eof = False

    async def _more(self) -> bool:
        """Read more of the body into _buf; False at its end."""
        if self._eof:
            return False
        if self._chunked:
            size = int((await self.reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self._eof = True
                return False
            self._buf += await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            return True
        if self._left == 0:
            self._eof = True
            return False
        data = await self.reader.read(65536 if self._left is None else min(self._left, 65536))
        if not data:
            self._eof = True
            return False
        if self._left is not None:
            self._left -= len(data)
        self._buf += data
        return True

    async def readline(self) -> bytes:
        """The body's next line; b"" at its end."""
        while b"\n" not in self._buf:
            if not await self._more():
                line, self._buf = self._buf, b""
                return line
        line, _, self._buf = self._buf.partition(b"\n")
        return line + b"\n"

    async def read(self) -> bytes:
        while await self._more():
            pass
        data, self._buf = self._buf, b""
        return data

    def close(self) -> None:
        self.writer.close()


class AsyncClient:
    """The asyncio client of the sidecar serving socket (default: as the
    baton command finds it). Every call opens a connection of its own."""

    def __init__(self, socket: Optional[str] = None):
        self.socket = _wire.socket_path(socket)

    async def _open(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> _Answer:
        data = json.dumps(body).encode() if body is not None else b""
        try:
            reader, writer = await asyncio.open_unix_connection(self.socket)
        except OSError as err:
            raise SidecarUnreachable(self.socket, err) from err
        try:
            writer.write(f"{method} {path} HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
            await writer.drain()
            status = int((await reader.readline()).split(b" ", 2)[1])
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
        except (OSError, ValueError, IndexError) as err:
            writer.close()
            raise SidecarUnreachable(self.socket, err) from err
        except BaseException:  # cancelled before the answer: hang up (a waiter is withdrawn)
            writer.close()
            raise
        answer = _Answer(reader, writer, status, headers)
        if status != 200:
            try:
                raise _wire.error_of(status, await answer.read())
            finally:
                answer.close()
        return answer

    async def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> Any:
        answer = await self._open(method, path, body)
        try:
            return json.loads(await answer.read())
        finally:
            answer.close()

    async def acquire(self, key: str, **claim: Any) -> dict[str, Any]:
        """Client.acquire, awaited."""
        return await self._call("POST", _wire.lock_path(key), _wire.claim(**claim))

    async def release(self, key: str, owner: str) -> dict[str, Any]:
        return await self._call("DELETE", _wire.lock_path(key) + _wire.query(owner=owner))

    async def extend(self, key: str, owner: str, ttl: Optional[str] = None) -> dict[str, Any]:
        return await self._call("POST", _wire.lock_path(key, "extend"), _wire.claim(owner=owner, ttl=ttl))

    async def done(self, key: str, owner: str, ok: bool, result: Optional[str] = None) -> dict[str, Any]:
        body: dict[str, Any] = {"owner": owner, "ok": ok}
        if result is not None:
            body["result"] = result
        return await self._call("POST", _wire.lock_path(key, "done"), body)

    async def status(self, key: str) -> dict[str, Any]:
        return await self._call("GET", _wire.lock_path(key))

    async def list(self, prefix: str = "") -> list[dict[str, Any]]:
        return (await self._call("GET", "/v1/locks" + _wire.query(prefix=prefix)))["locks"]

    async def force_release(self, key: str, fence: Optional[int] = None, by: Optional[str] = None) -> dict[str, Any]:
        return await self._call("DELETE", _wire.lock_path(key) + _wire.query(force="true", fence=fence, by=by))

    def hold(self, key: str, on_lost: Optional[Callable[[LockLost], None]] = None, **claim: Any) -> "AsyncHold":
        """A lock held through a hold stream, as an async context manager:

            async with client.hold("nightly", owner="exec-1", wait="1m") as lock:
                await work(lock.fence)

        The task running the block is cancelled as soon as the lock may be
        lost (a lost line, the stream's end, silence past
        valid_for_seconds), and the block raises LockLost with the reason."""
        return AsyncHold(self, key, _wire.claim(**claim), on_lost)

    def lead(self, name: str, on_lost: Optional[Callable[[LockLost], None]] = None, **claim: Any) -> "AsyncHold":
        """Campaign in election name and lead for as long as the async with
        block runs (Client.lead): the task running it is cancelled as soon
        as the leadership may be lost."""
        h = AsyncHold(self, name, _wire.claim(**claim), on_lost)
        h.election = True
        return h

    async def leader(self, name: str) -> dict[str, Any]:
        """Who leads election name (Client.leader)."""
        return await self._call("GET", _wire.election_path(name))

    async def proclaim(self, name: str, owner: str, value: str) -> dict[str, Any]:
        """The leader (owner) announces value instead; its fence stays."""
        return await self._call("POST", _wire.election_path(name, "proclaim"), {"owner": owner, "value": value})

    async def resign(self, name: str, owner: str) -> dict[str, Any]:
        """End owner's leadership of election name, or its candidacy."""
        return await self._call("DELETE", _wire.election_path(name) + _wire.query(owner=owner))

    async def observe(self, name: Optional[str] = None, prefix: str = "") -> AsyncIterator[dict[str, Any]]:
        """Follow election name, or every election under prefix (Client.observe)."""
        path = _wire.election_path(name, "observe") if name else "/v1/elections:observe" + _wire.query(prefix=prefix)
        answer = await self._open("GET", path)
        try:
            while line := await answer.readline():
                yield json.loads(line)
        finally:
            answer.close()

    async def watch(self, key: Optional[str] = None, prefix: str = "") -> AsyncIterator[dict[str, Any]]:
        """Follow a lock, or every lock under prefix (Client.watch)."""
        path = _wire.lock_path(key, "watch") if key else "/v1/locks:watch" + _wire.query(prefix=prefix)
        answer = await self._open("GET", path)
        try:
            while line := await answer.readline():
                yield json.loads(line)
        finally:
            answer.close()


class AsyncHold(_wire.Held):
    """A lock held through a hold stream (AsyncClient.hold)."""

    def __init__(self, client: AsyncClient, key: str, body: dict[str, Any], on_lost: Optional[Callable[[LockLost], None]]):
        self._client, self.key, self._body, self._on_lost = client, key, body, on_lost
        self.grant: dict[str, Any] = {}
        self.lost: Optional[LockLost] = None
        self._answer: Optional[_Answer] = None
        self._task: Optional[asyncio.Task] = None
        self._follower: Optional[asyncio.Task] = None
        self._silence: Optional[asyncio.TimerHandle] = None
        self._released = asyncio.Event()
        self._delete_sent = False
        self._cancelled = False
        self._exiting = False

    async def __aenter__(self) -> "AsyncHold":
        answer = await self._client._open("POST", self._stream_path(), self._body)
        try:
            while (event := _wire.granted(self.key, await answer.readline())) is None:
                pass
        except BaseException:
            answer.close()  # withdraws a waiter whose task was cancelled
            raise
        self.grant, self._answer = event, answer
        self._task = asyncio.current_task()
        self._note(event)
        self._follower = asyncio.create_task(self._follow())
        return self

    def _note(self, event: dict[str, Any]) -> None:
        left = _wire.valid_for(event)
        if left is not None:
            if self._silence is not None:
                self._silence.cancel()
            self._silence = asyncio.get_running_loop().call_later(
                max(left, 0), self._end, SILENT, "nothing heard from the sidecar within the lock's valid_for_seconds")

    async def _follow(self) -> None:
        assert self._answer is not None
        try:
            while line := await self._answer.readline():
                event = json.loads(line)
                if event.get("event") == "released":
                    if not self._delete_sent:  # another caller of the same owner let it go: the work must stop
                        self._end("released", "released by another caller with its owner")
                    elif self.lost is None:
                        self._released.set()
                    return
                if event.get("event") == "lost":
                    self._end(event.get("reason", "lost"), event.get("message", ""))
                    return
                self._note(event)
            self._end(STREAM_ENDED, "the sidecar's stream ended without a last line")
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a broken chunk, a bad line: the stream is over
            self._end(STREAM_ENDED, f"the sidecar's stream broke: {err!r}")

    def _end(self, reason: str, message: str) -> None:
        """The lock may be lost: say why, and cancel the task running the block."""
        if self.lost is not None or self._released.is_set():
            return
        self.lost = LockLost(self.key, self.grant.get("fence", 0), reason, message)
        if self._silence is not None:
            self._silence.cancel()
        if self._task is not None and not self._task.done() and not self._exiting:
            self._cancelled = True
            self._task.cancel(f"baton: {self.lost}")
        self._tell_lost()

    def held(self) -> bool:
        return self.lost is None

    async def release(self) -> None:
        """Release the lock (one DELETE, however often called) and close
        the stream. A lock that is gone (lost, or taken from its owner) is
        recorded in lost rather than raised."""
        try:
            if self.lost is None and not self._released.is_set() and not self._delete_sent:
                self._delete_sent = True
                try:
                    await self._client._call("DELETE", self._let_go_path())
                except BatonError as err:  # not released by this DELETE: the lock is not ours
                    self._end(err.body.get("reason") or err.code, err.message)
                else:
                    try:
                        await asyncio.wait_for(self._released.wait(), 10)
                    except TimeoutError:
                        pass  # released; its line did not come: hang up
        finally:
            await self._stop()

    async def _stop(self) -> None:
        if self._silence is not None:
            self._silence.cancel()
        if self._answer is not None:
            self._answer.close()
        if self._follower is not None:
            self._follower.cancel()
            await asyncio.gather(self._follower, return_exceptions=True)

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        self._exiting = True  # a loss heard from now on is raised, not a cancellation
        await self.release()
        if self.lost is None:
            return False
        if self._cancelled and self._task is not None:
            self._task.uncancel()
        if self._task is not None and self._task.cancelling() > 0:
            return False  # cancelled from outside: that goes on; the loss is in .lost
        if exc_type is None or exc_type is asyncio.CancelledError or not isinstance(exc, BatonError):
            raise self.lost from (exc if exc_type is not asyncio.CancelledError else None)
        return False
