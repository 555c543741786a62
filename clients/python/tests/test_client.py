"""Tests of baton_client against real sidecars on a real etcd.

cmd/sidecar's TestPythonClient installs the package with pip, starts two
sidecars in one scope and runs these with BATON_SOCKET_A and BATON_SOCKET_B
set to their sockets, and BATON_TEST_REVOKE to a URL that revokes the etcd
lease of a lock's holder (POST ?key=KEY), as when etcd expires it.
"""
import asyncio
import os
import threading
import time
import unittest
import urllib.request

import baton_client
from baton_client import AsyncClient, BatonError, Client, LockLost, SidecarUnreachable

A = os.environ["BATON_SOCKET_A"]
B = os.environ["BATON_SOCKET_B"]


def revoke(key):
    """Revoke the etcd lease of key's holder."""
    with urllib.request.urlopen(urllib.request.Request(os.environ["BATON_TEST_REVOKE"] + "?key=" + key, method="POST")) as r:
        assert r.status == 200, r.status


def wait_until(cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.05)


class Plain(unittest.TestCase):
    def test_installed_package(self):
        self.assertNotIn(os.path.join("clients", "python"), baton_client.__file__)

    def test_acquire_status_list_release(self):
        a, b = Client(A), Client(B)
        grant = a.acquire("py/report", owner="exec-1", ttl="1m")
        self.assertTrue(grant["granted"])
        st = b.status("py/report")
        self.assertTrue(st["held"])
        self.assertEqual(st["holder"]["owner"], "exec-1")
        self.assertEqual(st["fence"], grant["fence"])
        self.assertIn("py/report", [lock["key"] for lock in b.list("py/")])
        # The webhook pattern: a second caller learns who runs.
        with self.assertRaises(BatonError) as refused:
            b.acquire("py/report", owner="exec-2")
        self.assertEqual((refused.exception.status, refused.exception.code), (409, "already_running"))
        self.assertEqual(refused.exception.holder["owner"], "exec-1")
        self.assertEqual(refused.exception.fence, grant["fence"])
        released = a.release("py/report", "exec-1")
        self.assertTrue(released["released"])
        self.assertFalse(b.status("py/report")["held"])

    def test_errors_carry_the_code(self):
        with self.assertRaises(BatonError) as bad:
            Client(A).acquire("py/bad key", owner="x")
        self.assertEqual((bad.exception.status, bad.exception.code), (400, "invalid_key"))
        with self.assertRaises(SidecarUnreachable) as none:
            Client(A + ".none").status("py/x")
        self.assertIn(A + ".none", str(none.exception))
        self.assertIn("BATON_SOCKET", str(none.exception))

    def test_hold_and_release(self):
        a, b = Client(A), Client(B)
        with a.hold("py/hold", owner="exec-1") as lock:
            self.assertGreater(lock.fence, 0)
            self.assertTrue(lock.held())
            with self.assertRaises(BatonError) as refused:
                with b.hold("py/hold", owner="exec-2"):
                    pass
            self.assertEqual(refused.exception.code, "already_running")
            fence = lock.fence
        self.assertFalse(b.status("py/hold")["held"])
        with b.hold("py/hold", owner="exec-3") as lock:
            self.assertGreater(lock.fence, fence)
            lock.release()
            lock.release()  # one DELETE: a later holder with the same owner keeps its lock
            again = b.acquire("py/hold", owner="exec-3")
        self.assertIsNone(lock.lost)
        self.assertEqual(b.status("py/hold")["fence"], again["fence"])
        b.release("py/hold", "exec-3")

    def test_release_by_another_caller_stops_the_work(self):
        lost = []
        with self.assertRaises(LockLost) as raised:
            with Client(A).hold("py/taken", owner="exec-1", on_lost=lost.append) as lock:
                Client(A).release("py/taken", "exec-1")  # the same owner, another caller
                self.assertIsNotNone(lock.wait_lost(10))
        self.assertEqual(raised.exception.reason, "released")
        self.assertEqual(len(lost), 1)
        again = Client(A).acquire("py/taken", owner="exec-1")  # no second DELETE frees it
        self.assertTrue(Client(B).status("py/taken")["held"])
        Client(A).release("py/taken", "exec-1")
        self.assertGreater(again["fence"], 0)

    def test_loss_stops_the_work(self):
        lost = []
        with self.assertRaises(LockLost) as raised:
            with Client(A).hold("py/lost", owner="exec-1", on_lost=lost.append) as lock:
                revoke("py/lost")
                self.assertIsNotNone(lock.wait_lost(10))
                with self.assertRaises(LockLost):
                    lock.check()  # before the next step that writes
        self.assertEqual(raised.exception.reason, "lease_lost")
        self.assertEqual(raised.exception.code, "lock_lost")
        self.assertEqual(len(lost), 1)

    def test_long_job_renews(self):
        with Client(A).hold("py/long", owner="exec-1", ttl="1s") as lock:
            time.sleep(3)  # three of its ttl: the sidecar renews it
            lock.check()
            st = Client(B).status("py/long")
            self.assertEqual((st["held"], st["fence"]), (True, lock.fence))

    def test_semaphore_and_readers(self):
        a, b = Client(A), Client(B)
        a.acquire("py/sem", owner="s1", limit=2)
        b.acquire("py/sem", owner="s2", limit=2)
        with self.assertRaises(BatonError) as full:
            a.acquire("py/sem", owner="s3", limit=2)
        self.assertEqual(full.exception.code, "already_running")
        a.release("py/sem", "s1")
        b.release("py/sem", "s2")
        a.acquire("py/rw", owner="r1", mode="read")
        b.acquire("py/rw", owner="r2", mode="read")
        with self.assertRaises(BatonError) as writer:
            a.acquire("py/rw", owner="w1", mode="write")
        self.assertEqual(writer.exception.code, "already_running")
        a.release("py/rw", "r1")
        b.release("py/rw", "r2")

    def test_run_once(self):
        a, b = Client(A), Client(B)
        a.acquire("py/migrate", owner="m1", once=True)
        a.done("py/migrate", "m1", True, "v42")
        with self.assertRaises(BatonError) as done:
            b.acquire("py/migrate", owner="m2", once=True)
        self.assertEqual(done.exception.code, "already_done")
        self.assertEqual(done.exception.body["run"]["result"], "v42")

    def test_watch(self):
        events = []
        ready = threading.Event()

        def follow():
            for ev in Client(B).watch("py/watched"):
                events.append(ev)
                if ev["event"] == "synced":
                    ready.set()
                if ev["event"] == "granted":
                    return

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        self.assertTrue(ready.wait(10))
        grant = Client(A).acquire("py/watched", owner="w1")
        t.join(10)
        self.assertEqual(events[-1]["event"], "granted")
        self.assertEqual(events[-1]["fence"], grant["fence"])
        Client(A).release("py/watched", "w1")

    def test_election(self):
        a, b = Client(A), Client(B)
        told = []
        synced = threading.Event()

        def observe():
            for ev in b.observe("py/scheduler"):
                if ev["event"] not in ("queued", "heartbeat"):
                    told.append(ev)
                if ev["event"] == "synced":
                    synced.set()
                if len(told) >= 6:  # state, synced, granted, proclaimed, released, granted
                    return

        watcher = threading.Thread(target=observe, daemon=True)
        watcher.start()
        self.assertTrue(synced.wait(10))
        second = {}

        def standby():
            with b.lead("py/scheduler", owner="replica-2", value="10.0.0.2") as two:
                second["fence"], second["value"] = two.fence, two.grant["value"]

        with a.lead("py/scheduler", owner="replica-1", value="10.0.0.1") as one:
            self.assertEqual(one.grant["value"], "10.0.0.1")
            self.assertEqual(b.leader("py/scheduler")["holder"]["value"], "10.0.0.1")
            with self.assertRaises(BatonError) as other:
                b.proclaim("py/scheduler", "replica-2", "me")
            self.assertEqual(other.exception.code, "not_owner")
            self.assertEqual(a.proclaim("py/scheduler", "replica-1", "10.0.0.1:9090")["fence"], one.fence)
            t = threading.Thread(target=standby)
            t.start()
            wait_until(lambda: a.leader("py/scheduler")["waiters"] == 1, "replica-2 campaigning")
            first = one.fence
        t.join(10)
        self.assertGreater(second["fence"], first)
        self.assertEqual(second["value"], "10.0.0.2")
        watcher.join(10)
        self.assertEqual([e["event"] for e in told], ["state", "synced", "granted", "proclaimed", "released", "granted"])
        self.assertEqual(told[3]["holder"]["value"], "10.0.0.1:9090")
        self.assertEqual(told[5]["fence"], second["fence"])


class Async(unittest.IsolatedAsyncioTestCase):
    async def test_resigned_by_another_caller_stops_the_leader(self):
        a, b = AsyncClient(A), AsyncClient(B)
        with self.assertRaises(LockLost) as lost:
            async with a.lead("py/async-leader", owner="leader-1", value="v1") as lead:
                self.assertEqual((await b.leader("py/async-leader"))["fence"], lead.fence)
                await a.resign("py/async-leader", "leader-1")  # another caller of its sidecar resigns it
                await asyncio.sleep(30)  # cancelled as the released line comes
        self.assertEqual(lost.exception.reason, "released")
        self.assertFalse((await b.leader("py/async-leader"))["held"])

    async def test_loss_cancels_the_task(self):
        reached = False

        def on_lost(lost):  # a callback that fails does not keep the work running
            raise RuntimeError("on_lost failed")

        with self.assertRaises(LockLost) as raised:
            async with AsyncClient(A).hold("py/alost", owner="exec-1", on_lost=on_lost) as lock:
                self.assertGreater(lock.fence, 0)
                await asyncio.to_thread(revoke, "py/alost")
                await asyncio.sleep(30)  # the work, cancelled by the loss
                reached = True
        self.assertFalse(reached, "the work ran on after its lock was lost")
        self.assertEqual(raised.exception.reason, "lease_lost")
        self.assertIsNone(asyncio.current_task().cancelling() or None)

    async def test_rapid_resume_clicks_run_one_task(self):
        # Ten clicks of "resume" for one (flow, phase): one runs, nine are
        # told who runs.
        client = AsyncClient(A)
        results = await asyncio.gather(*(client.acquire("py/flow-7/phase-2", owner=f"click-{i}") for i in range(10)),
                                       return_exceptions=True)
        granted = [r for r in results if isinstance(r, dict)]
        refused = [r for r in results if isinstance(r, BatonError)]
        self.assertEqual((len(granted), len(refused)), (1, 9), results)
        self.assertTrue(all(r.code == "already_running" and r.holder["owner"] == granted[0]["owner"] for r in refused))
        await client.release("py/flow-7/phase-2", granted[0]["owner"])

    async def test_chat_turns_wait_their_turn(self):
        # Turns of one chat, each arriving while the ones before wait, run
        # in the order they arrived.
        client, order, go = AsyncClient(B), [], asyncio.Event()

        async def turn(n):
            async with client.hold("py/chat-9", owner=f"turn-{n}", wait="30s"):
                order.append(n)
                await go.wait()

        tasks = [asyncio.create_task(turn(0))]
        while order != [0]:
            await asyncio.sleep(0.05)
        for n in range(1, 4):
            tasks.append(asyncio.create_task(turn(n)))
            while (await client.status("py/chat-9"))["waiters"] < n:
                await asyncio.sleep(0.05)
        go.set()
        await asyncio.gather(*tasks)
        self.assertEqual(order, [0, 1, 2, 3])

    async def test_refusal_and_release(self):
        a, b = AsyncClient(A), AsyncClient(B)
        async with a.hold("py/ahold", owner="exec-1") as lock:
            with self.assertRaises(BatonError) as refused:
                async with b.hold("py/ahold", owner="exec-2"):
                    pass
            self.assertEqual(refused.exception.code, "already_running")
            self.assertEqual(refused.exception.holder["owner"], "exec-1")
            fence = lock.fence
        self.assertFalse((await b.status("py/ahold"))["held"])
        async with b.hold("py/ahold", owner="exec-3", wait="5s") as lock:
            self.assertGreater(lock.fence, fence)

    async def test_wait_withdrawn_when_cancelled(self):
        a, b = AsyncClient(A), AsyncClient(B)
        async with a.hold("py/await", owner="exec-1"):
            waiter = asyncio.create_task(b.hold("py/await", owner="exec-2", wait="forever").__aenter__())
            while (await a.status("py/await"))["waiters"] < 1:
                await asyncio.sleep(0.05)
            waiter.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await waiter
            while (await a.status("py/await"))["waiters"] > 0:
                await asyncio.sleep(0.05)


if __name__ == "__main__":
    unittest.main()
