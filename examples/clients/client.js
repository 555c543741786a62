// Hold a Baton lock while a phase runs, with nothing but Node's standard library.
// The lock is held as long as the request stays open; a second caller gets 409
// and the running execution's id: the webhook pattern.
const http = require("node:http");

const socketPath = process.env.BATON_SOCKET || "/var/run/baton/baton.sock";

function runPhase(key, owner, work) {
  return new Promise((resolve, reject) => {
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
            if (event.event === "granted") {
              try {
                await work(event.fence); // pass the fence to what you write
                resolve({ status: 200, body: { execution_id: owner } });
              } catch (err) {
                reject(err);
              } finally {
                req.destroy(); // closing the connection releases the lock
                console.log("released");
              }
            } else if (["lost", "refused", "error"].includes(event.event)) {
              req.destroy();
              reject(new Error(`baton: ${event.event}: ${event.message}`));
            }
          }
        });
        res.on("end", () => {
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
runPhase(key, "exec-js", async (fence) => console.log(`running ${key} with fence ${fence}`))
  .then(({ status, body }) => console.log(status, JSON.stringify(body)))
  .catch((err) => {
    console.error(err.message);
    process.exit(1);
  });
