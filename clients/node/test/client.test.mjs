// Tests of @baton-dev/client against real sidecars on a real etcd.
//
// cmd/sidecar's TestNodeClient installs the package with npm into an app of
// its own, starts two sidecars in one scope and runs these there with
// BATON_SOCKET_A and BATON_SOCKET_B set to their sockets, and
// BATON_TEST_REVOKE to a URL that revokes the etcd lease of a lock's holder
// (POST ?key=KEY), as when etcd expires it, and BATON_TEST_FREEZE to a URL
// that freezes the first sidecar with SIGSTOP (POST; ?thaw: SIGCONT).
import assert from "node:assert/strict";
import { realpathSync } from "node:fs";
import { createRequire } from "node:module";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";

import { BatonError, Client, Codes, LockLost, SidecarUnreachable } from "@baton-dev/client";

const A = process.env.BATON_SOCKET_A;
const B = process.env.BATON_SOCKET_B;

async function revoke(key) {
  const res = await fetch(`${process.env.BATON_TEST_REVOKE}?key=${encodeURIComponent(key)}`, { method: "POST" });
  assert.equal(res.status, 200);
}

async function freeze(thaw = false) {
  const res = await fetch(process.env.BATON_TEST_FREEZE + (thaw ? "?thaw" : ""), { method: "POST" });
  assert.equal(res.status, 200);
}

async function until(cond, what, ms = 10_000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) {
      assert.fail(`${what}: not within ${ms} ms`);
    }
    await sleep(50);
  }
}

async function refusal(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof BatonError, `${err} is not a BatonError`);
    return err;
  }
  assert.fail("not refused");
}

describe("the client", () => {
  it("is the package npm installed", () => {
    const main = createRequire(import.meta.url).resolve("@baton-dev/client");
    assert.match(realpathSync(main), /clients\/node\/dist\/index\.js$/);
    assert.ok(Codes.includes("already_running"));
  });

  it("acquires, tells the status and the list, refuses naming the holder, releases", async () => {
    const a = new Client({ socket: A });
    const b = new Client({ socket: B });
    const grant = await a.acquire("node/report", { owner: "exec-1", ttl: "1m" });
    assert.equal(grant.granted, true);
    const st = await b.status("node/report");
    assert.equal(st.held, true);
    assert.equal(st.holder.owner, "exec-1");
    assert.equal(st.fence, grant.fence);
    assert.ok((await b.list("node/")).some((l) => l.key === "node/report"));
    // The webhook pattern: a second caller learns who runs.
    const refused = await refusal(b.acquire("node/report", { owner: "exec-2" }));
    assert.deepEqual([refused.status, refused.code], [409, "already_running"]);
    assert.equal(refused.holder.owner, "exec-1");
    assert.equal(refused.fence, grant.fence);
    assert.equal((await a.release("node/report", "exec-1")).released, true);
    assert.equal((await b.status("node/report")).held, false);
  });

  it("gives every error its code", async () => {
    const bad = await refusal(new Client({ socket: A }).acquire("node/bad key", { owner: "x" }));
    assert.deepEqual([bad.status, bad.code], [400, "invalid_key"]);
    const none = await refusal(new Client({ socket: A + ".none" }).status("node/x"));
    assert.ok(none instanceof SidecarUnreachable);
    assert.match(none.message, /BATON_SOCKET/);
    assert.ok(none.message.includes(A + ".none"));
  });

  it("holds, refuses a second holder, releases once, and fences grow", async () => {
    const a = new Client({ socket: A });
    const b = new Client({ socket: B });
    const lock = await a.hold("node/hold", { owner: "exec-1" });
    assert.ok(lock.fence > 0);
    assert.ok(lock.held());
    const refused = await refusal(b.hold("node/hold", { owner: "exec-2" }));
    assert.equal(refused.code, "already_running");
    assert.equal(refused.holder.owner, "exec-1");
    await lock.release();
    assert.equal((await b.status("node/hold")).held, false);
    const next = await b.hold("node/hold", { owner: "exec-3" });
    assert.ok(next.fence > lock.fence);
    await next.release();
    await next.release(); // one DELETE: a later holder with the same owner keeps its lock
    const again = await b.acquire("node/hold", { owner: "exec-3" });
    assert.equal(next.lost, undefined);
    assert.equal((await b.status("node/hold")).fence, again.fence);
    await b.release("node/hold", "exec-3");
  });

  it("stops the work when another caller releases the lock, and sends no DELETE after", async () => {
    const a = new Client({ socket: A });
    const lock = await a.hold("node/taken", { owner: "exec-1" });
    await new Client({ socket: A }).release("node/taken", "exec-1"); // another caller with the owner
    await until(() => lock.signal.aborted, "the hold's signal aborted");
    assert.equal(lock.lost.reason, "released");
    assert.throws(() => lock.check(), LockLost);
    const again = await a.acquire("node/taken", { owner: "exec-1" });
    await lock.release(); // no DELETE: it would free the lock taken again
    const st = await a.status("node/taken");
    assert.deepEqual([st.held, st.fence], [true, again.fence]);
    await a.release("node/taken", "exec-1");
  });

  it("releases a hold at the block's end (Symbol.asyncDispose), and when the caller's signal aborts", async () => {
    const a = new Client({ socket: A });
    const lock = await a.hold("node/disposed", { owner: "exec-1" });
    await lock[Symbol.asyncDispose]();
    assert.equal((await a.status("node/disposed")).held, false);
    assert.equal(lock.lost, undefined);
    const caller = new AbortController();
    const held = await a.hold("node/disposed", { owner: "exec-2" }, { signal: caller.signal });
    caller.abort();
    await until(async () => !(await a.status("node/disposed")).held, "the lock released");
    assert.ok(held.signal.aborted);
    assert.equal(held.lost, undefined);
  });

  it("aborts the work's signal when the lock is lost, and rejects with the reason", async () => {
    const told = [];
    let reached = false;
    const err = await refusal(
      new Client({ socket: A }).withLock(
        "node/lost",
        { owner: "exec-1" },
        async (lock) => {
          assert.ok(lock.fence > 0);
          await revoke("node/lost");
          await sleep(30_000, undefined, { signal: lock.signal }); // the work, stopped by the loss
          reached = true;
        },
        { onLost: (lost) => told.push(lost) },
      ),
    );
    assert.equal(reached, false, "the work ran on after its lock was lost");
    assert.ok(err instanceof LockLost);
    assert.equal(err.reason, "lease_lost");
    assert.equal(err.code, "lock_lost");
    assert.equal(told.length, 1);
  });

  it("keeps a long job's lock for three of its ttl", async () => {
    const lock = await new Client({ socket: A }).hold("node/long", { owner: "exec-1", ttl: "1s" });
    await sleep(3000);
    lock.check();
    const st = await new Client({ socket: B }).status("node/long");
    assert.deepEqual([st.held, st.fence], [true, lock.fence]);
    await lock.release();
  });

  it("takes semaphore units and shares a read lock", async () => {
    const a = new Client({ socket: A });
    const b = new Client({ socket: B });
    await a.acquire("node/sem", { owner: "s1", limit: 2 });
    await b.acquire("node/sem", { owner: "s2", limit: 2 });
    assert.equal((await refusal(a.acquire("node/sem", { owner: "s3", limit: 2 }))).code, "already_running");
    await a.release("node/sem", "s1");
    await b.release("node/sem", "s2");
    await a.acquire("node/rw", { owner: "r1", mode: "read" });
    await b.acquire("node/rw", { owner: "r2", mode: "read" });
    assert.equal((await refusal(a.acquire("node/rw", { owner: "w1", mode: "write" }))).code, "already_running");
    await a.release("node/rw", "r1");
    await b.release("node/rw", "r2");
  });

  it("runs once", async () => {
    const a = new Client({ socket: A });
    await a.acquire("node/migrate", { owner: "m1", once: true });
    await a.done("node/migrate", "m1", true, "v42");
    const done = await refusal(new Client({ socket: B }).acquire("node/migrate", { owner: "m2", once: true }));
    assert.equal(done.code, "already_done");
    assert.equal(done.run.result, "v42");
  });

  it("watches a lock", async () => {
    const seen = [];
    let synced;
    const isSynced = new Promise((resolve) => (synced = resolve));
    const following = (async () => {
      for await (const ev of new Client({ socket: B }).watch("node/watched")) {
        seen.push(ev);
        if (ev.event === "synced") synced();
        if (ev.event === "granted") return;
      }
    })();
    await isSynced;
    const grant = await new Client({ socket: A }).acquire("node/watched", { owner: "w1" });
    await following;
    assert.equal(seen.at(-1).fence, grant.fence);
    await new Client({ socket: A }).release("node/watched", "w1");
  });

  it("runs one of ten rapid resume clicks, and tells the nine who runs", async () => {
    const client = new Client({ socket: A });
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) => client.acquire("node/flow-7/phase-2", { owner: `click-${i}` })),
    );
    const granted = results.filter((r) => r.status === "fulfilled").map((r) => r.value);
    const refused = results.filter((r) => r.status === "rejected").map((r) => r.reason);
    assert.deepEqual([granted.length, refused.length], [1, 9]);
    for (const r of refused) {
      assert.equal(r.code, "already_running");
      assert.equal(r.holder.owner, granted[0].owner);
    }
    await client.release("node/flow-7/phase-2", granted[0].owner);
  });

  it("serves chat turns in the order they queued", async () => {
    const client = new Client({ socket: B });
    const order = [];
    let go;
    const gate = new Promise((resolve) => (go = resolve));
    const turn = (n) =>
      client.withLock("node/chat-9", { owner: `turn-${n}`, wait: "30s" }, async () => {
        order.push(n);
        await gate;
      });
    const turns = [turn(0)];
    await until(() => order.length === 1, "the first turn");
    for (let n = 1; n < 4; n++) {
      turns.push(turn(n));
      await until(async () => (await client.status("node/chat-9")).waiters >= n, `turn ${n} queued`);
    }
    go();
    await Promise.all(turns);
    assert.deepEqual(order, [0, 1, 2, 3]);
  });

  it("withdraws a waiter whose signal aborts", async () => {
    const a = new Client({ socket: A });
    const lock = await a.hold("node/await", { owner: "exec-1" });
    const gaveUp = new AbortController();
    const waiter = new Client({ socket: B }).hold("node/await", { owner: "exec-2", wait: "forever" }, { signal: gaveUp.signal });
    await until(async () => (await a.status("node/await")).waiters === 1, "the waiter queued");
    gaveUp.abort(new Error("the caller gave up"));
    await assert.rejects(waiter, /the caller gave up/);
    await until(async () => (await a.status("node/await")).waiters === 0, "the waiter withdrawn");
    await lock.release();
  });

  it("elects a leader, proclaims, observes and hands over on resignation", async () => {
    const a = new Client({ socket: A });
    const b = new Client({ socket: B });
    const told = [];
    const observing = (async () => {
      for await (const ev of b.observe("node/scheduler")) {
        if (ev.event !== "queued" && ev.event !== "heartbeat") {
          told.push(ev);
        }
        if (told.filter((e) => e.event === "granted").length === 2) {
          return; // the second leader
        }
      }
    })();
    await until(() => told.some((e) => e.event === "synced"), "the observer synced");
    const one = await a.lead("node/scheduler", { owner: "replica-1", value: "10.0.0.1" });
    assert.equal(one.grant.value, "10.0.0.1");
    assert.equal((await b.leader("node/scheduler")).holder.value, "10.0.0.1");
    const other = await refusal(b.proclaim("node/scheduler", "replica-2", "me"));
    assert.equal(other.code, "not_owner");
    assert.equal((await a.proclaim("node/scheduler", "replica-1", "")).fence, one.fence);
    const standby = b.lead("node/scheduler", { owner: "replica-2", value: "10.0.0.2" });
    await until(async () => (await a.leader("node/scheduler")).waiters === 1, "replica-2 campaigning");
    await one.release();
    const two = await standby;
    assert.ok(two.fence > one.fence, `the second leader's fence ${two.fence} after ${one.fence}`);
    await observing;
    assert.deepEqual(told.map((e) => e.event).filter((e) => e !== "released"), ["state", "synced", "granted", "proclaimed", "granted"]);
    assert.equal(told.at(-1).fence, two.fence);
    await b.resign("node/scheduler", "replica-2");
    await until(() => two.signal.aborted, "the leadership's signal aborted by the resignation");
  });

  // Last: it freezes the first sidecar, whose lease then expires.
  it("stops the work when its sidecar freezes, before the next holder is granted the lock", async () => {
    const lock = await new Client({ socket: A }).hold("node/frozen", { owner: "exec-1" });
    await freeze();
    try {
      const next = await new Client({ socket: B }).hold("node/frozen", { owner: "exec-2", wait: "30s" });
      assert.ok(lock.signal.aborted, "the next holder was granted the lock while the frozen sidecar's holder worked on");
      assert.equal(lock.lost.reason, "silent");
      await next.release();
    } finally {
      await freeze(true);
    }
    await lock.release();
  });
});
