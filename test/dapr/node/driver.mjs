// A driver of Dapr's Node SDK for Baton's tests: it reads one JSON request
// a line from stdin and answers each with one JSON line on stdout.
//
//   {"id":1,"op":"lock","port":3500,"store":"lockstore","resource":"r","owner":"o","expiry":60}
//     -> {"id":1,"success":true}
//   {"id":2,"op":"unlock","port":3500,"store":"lockstore","resource":"r","owner":"o"}
//     -> {"id":2,"status":0}
//   an SDK error -> {"id":N,"error":{"status":400,"body":{"errorCode":...,"message":...}}}
//
// One DaprClient per port, over HTTP, made and started as an app does.
import readline from "node:readline";
import { CommunicationProtocolEnum, DaprClient, LogLevel } from "@dapr/dapr";

const clients = new Map();

async function client(port) {
  let c = clients.get(port);
  if (!c) {
    c = new DaprClient({
      daprHost: "127.0.0.1",
      daprPort: String(port),
      communicationProtocol: CommunicationProtocolEnum.HTTP,
      logger: { level: LogLevel.Error },
    });
    await c.start();
    clients.set(port, c);
  }
  return c;
}

async function handle(req) {
  const c = await client(req.port);
  if (req.op === "lock") {
    const r = await c.lock.lock(req.store, req.resource, req.owner, req.expiry);
    return { success: r.success };
  }
  if (req.op === "unlock") {
    const r = await c.lock.unlock(req.store, req.resource, req.owner);
    return { status: r.status };
  }
  throw new Error(`unknown op ${req.op}`);
}

// An SDK error's message is JSON: {error, error_msg, status}.
function describe(e) {
  try {
    const o = JSON.parse(e.message);
    let body = o.error_msg;
    try {
      body = JSON.parse(o.error_msg);
    } catch {}
    return { status: o.status, body };
  } catch {
    return { message: String(e && e.message) };
  }
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  let out;
  try {
    out = { id: req.id, ...(await handle(req)) };
  } catch (e) {
    out = { id: req.id, error: describe(e) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
for (const c of clients.values()) await c.stop();
