// What the client's calls share: the socket's path, the API's paths, and
// HTTP over the unix socket with node:http.
import * as http from "node:http";
import * as readline from "node:readline";
import { BatonError, SidecarUnreachable, errorOf } from "./errors.js";
/** The socket of a pod's sidecar, where the injector mounts it. */
export const DEFAULT_SOCKET = "/var/run/baton/baton.sock";
/**
 * The sidecar's socket as the baton command finds it: path if given, else
 * $BATON_SOCKET, else $BATON_SOCKET_PATH, else the pod's socket.
 */
export function socketPath(path) {
    return path || process.env.BATON_SOCKET || process.env.BATON_SOCKET_PATH || DEFAULT_SOCKET;
}
/** The path of a lock's resource, or of an action on it (KEY:hold). */
export function lockPath(key, action = "") {
    const escaped = key.split("/").map(encodeURIComponent).join("/");
    return `/v1/locks/${escaped}${action ? ":" + action : ""}`;
}
/** The path of election name, with a custom method (campaign, proclaim, observe) after a colon. */
export function electionPath(name, action = "") {
    const escaped = name.split("/").map(encodeURIComponent).join("/");
    return `/v1/elections/${escaped}${action ? ":" + action : ""}`;
}
/** A query string of the parameters that are set. */
export function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
        if (v !== undefined && v !== "" && v !== false) {
            q.set(k, String(v));
        }
    }
    const s = q.toString();
    return s ? "?" + s : "";
}
/**
 * How many milliseconds from now the lock stays certainly the holder's on
 * the word of a granted or heartbeat event: its valid_for_seconds counted
 * from its at, when the sidecar sent it, not from when it was read.
 * undefined when the event says nothing of it.
 */
export function validFor(event, now = Date.now()) {
    if (event.valid_for_seconds === undefined) {
        return undefined;
    }
    const sent = Date.parse(event.at);
    const late = Number.isNaN(sent) ? 0 : Math.max(0, now - sent);
    return event.valid_for_seconds * 1000 - late;
}
/** The JSON of an answer's line or body; a BatonError (unexpected) when it is not JSON. */
export function parse(text) {
    try {
        return JSON.parse(text);
    }
    catch (err) {
        throw new BatonError("unexpected", `unexpected answer from the sidecar: ${text.slice(0, 200)}`, 0, {}, { cause: err });
    }
}
/**
 * Send a request to the sidecar and return its answer once it is 200;
 * otherwise reject with its BatonError. The signal, when it aborts before
 * the answer, hangs up (a waiter is withdrawn) and rejects with its reason.
 */
export function open(socket, method, path, body, signal) {
    return new Promise((resolve, reject) => {
        signal?.throwIfAborted();
        const data = body === undefined ? "" : JSON.stringify(body);
        const req = http.request({
            socketPath: socket,
            method,
            path,
            agent: false,
            headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data), Host: "baton" },
        });
        let answered = false;
        const onAbort = () => {
            req.destroy();
            reject(signal?.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        req.on("error", (err) => {
            signal?.removeEventListener("abort", onAbort);
            if (!answered) {
                reject(new SidecarUnreachable(socket, err));
            }
        });
        req.on("response", (res) => {
            answered = true;
            signal?.removeEventListener("abort", onAbort);
            res.setEncoding("utf8");
            if (res.statusCode !== 200) {
                let text = "";
                res.on("data", (chunk) => (text += chunk));
                res.on("end", () => reject(errorOf(res.statusCode ?? 0, text)));
                res.on("error", () => reject(errorOf(res.statusCode ?? 0, text)));
                return;
            }
            const rl = readline.createInterface({ input: res, crlfDelay: Infinity });
            let broke;
            res.on("error", (err) => {
                broke = err;
                rl.close();
            });
            const it = rl[Symbol.asyncIterator]();
            resolve({
                async next() {
                    let r;
                    try {
                        r = await it.next();
                    }
                    catch (err) {
                        throw new BatonError("stream_ended", `the sidecar's answer broke: ${err?.message ?? err}`, 0, {}, { cause: err });
                    }
                    if (r.done && broke !== undefined) {
                        throw new BatonError("stream_ended", `the sidecar's answer broke: ${broke?.message ?? broke}`, 0, {}, { cause: broke });
                    }
                    return r.done ? undefined : r.value;
                },
                close: () => {
                    rl.close();
                    req.destroy();
                },
            });
        });
        req.end(data);
    });
}
/** Send a request and return its JSON answer. */
export async function call(socket, method, path, body, signal) {
    const answer = await open(socket, method, path, body, signal);
    try {
        let text = "";
        for (let line = await answer.next(); line !== undefined; line = await answer.next()) {
            text += line + "\n";
        }
        return parse(text);
    }
    finally {
        answer.close();
    }
}
