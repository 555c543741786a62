// The errors of Baton's socket API, as classes that carry its code.
import type { ErrorBody, Holder, Run } from "./api.js";

/** A loss only a client sees: the hold stream ended without a last line. */
export const STREAM_ENDED = "stream_ended";
/** A loss only a client sees: nothing heard past the lock's valid_for_seconds. */
export const SILENT = "silent";

/**
 * An error answer of the sidecar: its code (one of the API's, `Codes`) and
 * a message a person can act on. `status` is the answer's HTTP status, 0
 * when the refusal came as a hold stream's refused or error event. `body`
 * is the whole error body: holder, fence, retry_at, run... as the code has
 * them.
 */
export class BatonError extends Error {
  readonly code: string;
  readonly status: number;
  readonly body: Partial<ErrorBody>;

  constructor(code: string, message: string, status = 0, body: Partial<ErrorBody> = {}, options?: ErrorOptions) {
    super(status ? `${message} (${status} ${code})` : `${message} (${code})`, options);
    this.name = "BatonError";
    this.code = code;
    this.status = status;
    this.body = body;
  }

  /** Who holds the lock, on a refusal (already_running, wait_timeout, lock_delayed). */
  get holder(): Holder | undefined {
    return this.body.holder;
  }

  /** The holder's fence, on a refusal. */
  get fence(): number | undefined {
    return this.body.fence;
  }

  /** The last finished run, on already_done. */
  get run(): Run | undefined {
    return this.body.run;
  }
}

/** The sidecar's socket could not be reached: the message names it. */
export class SidecarUnreachable extends BatonError {
  readonly socketPath: string;

  constructor(socketPath: string, cause: unknown) {
    super(
      "unreachable",
      `cannot reach the Baton sidecar at ${socketPath} (set BATON_SOCKET to its socket): ${(cause as Error)?.message ?? cause}`,
      0,
      {},
      { cause },
    );
    this.name = "SidecarUnreachable";
    this.socketPath = socketPath;
  }
}

/**
 * A held lock ended without its holder's release: the work done under it
 * must stop, another holder may have the lock already. `reason` is the
 * API's lost reason (expired, lease_lost, force_released, shutdown,
 * max_hold, etcd_rewound), or stream_ended (the stream ended without a last
 * line: the sidecar stopped or crashed, the connection broke), silent
 * (nothing heard from the sidecar past the lock's valid_for_seconds: it
 * froze, or lost etcd), or released (another caller released it with its
 * owner).
 */
export class LockLost extends BatonError {
  readonly key: string;
  readonly reason: string;
  readonly lostFence: number;

  constructor(key: string, fence: number, reason: string, message: string) {
    super("lock_lost", `lock ${JSON.stringify(key)} (fence ${fence}) lost: ${reason}: ${message}`, 0, {
      code: "lock_lost",
      message,
      key,
      fence,
    });
    this.name = "LockLost";
    this.key = key;
    this.reason = reason;
    this.lostFence = fence;
  }
}

/** The BatonError of an answer that is not 200. */
export function errorOf(status: number, data: string): BatonError {
  try {
    const body = JSON.parse(data) as ErrorBody;
    if (typeof body.code === "string" && typeof body.message === "string") {
      return new BatonError(body.code, body.message, status, body);
    }
  } catch {
    // not JSON: below
  }
  return new BatonError("unexpected", `unexpected answer: ${data.slice(0, 200)}`, status);
}
