// Hold a Baton lock while a phase runs, with nothing but Node's standard library.
// The lock is held as long as the request stays open; a second caller gets 409
// and the running execution's id: the webhook pattern. While the work runs,
// the stream is followed: a "lost" line, its end without a last line (the
// sidecar crashed) and silence past "valid_for_seconds" (the sidecar froze)
// all mean the lock may be someone else's, and the work must stop.
const http = require("node:http");

const socketPath = process.env.BATON_SOCKET || "/var/run/baton/baton.sock";

function runPhase(key, owner, work) {
  return new Promise((resolve, reject) => {
    const lock = { lost: null, until: 0 }; // work calls held(): is the lock still ours?
    const held = () => lock.lost === null && Date.now() < lock.until;
    const req = http.request(
      { socketPath, method: "POST", path: `/v1/locks/${key}:hold`, headers: { "Content-Type": "application/json" } },
      (res) => {
        let buf = "";
        res.setEncoding("utf8");
        res.on("data", async (chunk) => {
          buf += chunk;
          if (res.statusCode !== 200) return;
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            const event = JSON.parse(buf.slice(0, nl));
            buf = buf.slice(nl + 1);
            if (event.valid_for_seconds) lock.until = Date.now() + event.valid_for_seconds * 1000;
            if (event.event === "granted") {
              try {
                await work(event.fence, held); // pass the fence to what you write
                resolve({ status: 200, body: { execution_id: owner } });
              } catch (err) {
                reject(err);
              } finally {
                req.destroy(); // closing the connection releases the lock
                console.log("released");
              }
            } else if (["lost", "released", "refused", "error"].includes(event.event)) {
              lock.lost = event.message || event.event;
              req.destroy();
              reject(new Error(`baton: ${event.event}: ${event.message}`));
            }
          }
        });
        res.on("end", () => {
          lock.lost = lock.lost || "the stream ended without a last line: the sidecar stopped";
          if (res.statusCode === 409) {
            // webhook pattern: answer 409 with the running execution's id
            const running = JSON.parse(buf).holder.owner;
            resolve({ status: 409, body: { error: "already running", running_execution_id: running } });
          } else if (res.statusCode !== 200) {
            reject(new Error(`baton: ${res.statusCode} ${buf}`));
          }
        });
      },
    );
    req.on("error", (err) => {
      if (!req.destroyed) reject(new Error(`baton: cannot reach the sidecar at ${socketPath} (set BATON_SOCKET): ${err.message}`));
    });
    req.end(JSON.stringify({ owner, ttl: "10m" }));
  });
}

const key = "tenant-acme/gcp_billing_export";
runPhase(key, "exec-js", async (fence, held) => {
  console.log(`running ${key} with fence ${fence}`);
  for (let step = 0; step < 3; step++) {
    if (!held()) throw new Error("baton: lock lost, work stopped"); // check before each step that writes
    await new Promise((r) => setTimeout(r, 100)); // a step of the work, with the fence
  }
})
  .then(({ status, body }) => console.log(status, JSON.stringify(body)))
  .catch((err) => {
    console.error(err.message);
    process.exit(1);
  });
