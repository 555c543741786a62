// Run one phase under a Baton lock, with nothing but Node's standard library.
const http = require("node:http");

const socketPath = process.env.BATON_SOCKET || "/var/run/baton/baton.sock";

function call(method, path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { socketPath, method, path, headers: { "Content-Type": "application/json" } },
      (res) => {
        let data = "";
        res.on("data", (chunk) => (data += chunk));
        res.on("end", () => resolve({ status: res.statusCode, body: JSON.parse(data) }));
      },
    );
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

(async () => {
  const key = "tenant-acme/gcp_billing_export";
  const owner = "exec-js";
  const { status, body } = await call("POST", `/v1/locks/${key}`, { owner, ttl: "10m" });
  if (status === 409) {
    console.log(`already running: ${body.holder.owner} (${body.message})`);
    return;
  }
  if (status !== 200) throw new Error(`baton: ${status} ${body.code}: ${body.message}`);
  try {
    console.log(`running ${key} with fence ${body.fence}`); // pass the fence to what you write
  } finally {
    const rel = await call("DELETE", `/v1/locks/${key}?owner=${owner}`);
    console.log(rel.status === 200 ? "released" : `release: ${rel.body.code}: ${rel.body.message}`);
  }
})().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
