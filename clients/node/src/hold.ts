// Hold: a lock held through a hold stream, whose AbortSignal aborts the
// moment the lock may be lost.
import type { Event } from "./api.js";
import { BatonError, LockLost, SILENT, STREAM_ENDED } from "./errors.js";
import { type Answer, call, lockPath, query, validFor } from "./wire.js";

/** What a hold is told of, and by whom it is released. */
export interface HoldOptions {
  /** Called once with the loss, as the signal aborts. An error it throws is ignored. */
  onLost?: (lost: LockLost) => void;
}

/**
 * A lock held through a hold stream (Client.hold): the sidecar renews it
 * for as long as the hold lasts. `signal` aborts, with a LockLost as its
 * reason, the moment the lock may be lost: a lost line, the stream's end
 * without a last line (stream_ended), or no line before the last one's
 * valid_for_seconds ran out, counted from its at (silent). Pass it to
 * whatever the work does (fetch, timers, child processes, database
 * queries), and check it before each write.
 */
export class Hold {
  /** The lock's key. */
  readonly key: string;
  /** The stream's granted event. */
  readonly grant: Event;
  /** Aborts with a LockLost when the lock may be lost. */
  readonly signal: AbortSignal;
  /** The loss, once the lock may be lost; undefined while held or once released. */
  lost: LockLost | undefined;

  readonly #socket: string;
  readonly #answer: Answer;
  readonly #abort = new AbortController();
  readonly #onLost?: (lost: LockLost) => void;
  #silence: NodeJS.Timeout | undefined;
  #released = false;
  #releasing: Promise<void> | undefined;
  #releasedLine: (() => void) | undefined;
  readonly #following: Promise<void>;

  /** @internal Client.hold makes holds. */
  constructor(socket: string, key: string, grant: Event, answer: Answer, options: HoldOptions = {}) {
    this.#socket = socket;
    this.key = key;
    this.grant = grant;
    this.#answer = answer;
    this.#onLost = options.onLost;
    this.signal = this.#abort.signal;
    this.#note(grant);
    this.#following = this.#follow();
  }

  /** The lock's fencing token: pass it to what the work writes. */
  get fence(): number {
    return this.grant.fence ?? 0;
  }

  /** The holder's owner (execution id). */
  get owner(): string {
    return this.grant.owner ?? "";
  }

  /** Whether the lock is still held: neither lost nor released. */
  held(): boolean {
    return this.lost === undefined && !this.#released;
  }

  /** Throw the LockLost if the lock may be lost: call it before each step that writes. */
  check(): void {
    if (this.lost) {
      throw this.lost;
    }
  }

  #note(event: Event): void {
    const left = validFor(event);
    if (left === undefined) {
      return;
    }
    clearTimeout(this.#silence);
    this.#silence = setTimeout(
      () => this.#end(SILENT, "nothing heard from the sidecar within the lock's valid_for_seconds"),
      Math.max(left, 0),
    );
    this.#silence.unref();
  }

  async #follow(): Promise<void> {
    try {
      for (let r = await this.#answer.lines.next(); !r.done; r = await this.#answer.lines.next()) {
        if (r.value === "") {
          continue;
        }
        const event = JSON.parse(r.value) as Event;
        switch (event.event) {
          case "released":
            this.#released = true;
            this.#releasedLine?.();
            return;
          case "lost":
            this.#end(event.reason ?? "lost", event.message ?? "");
            return;
          default:
            this.#note(event);
        }
      }
      this.#end(STREAM_ENDED, "the sidecar's stream ended without a last line");
    } catch (err) {
      this.#end(STREAM_ENDED, `the sidecar's stream broke: ${(err as Error)?.message ?? err}`);
    }
  }

  /** The lock may be lost: say why, and abort the signal. */
  #end(reason: string, message: string): void {
    if (this.lost || this.#released) {
      return;
    }
    clearTimeout(this.#silence);
    this.lost = new LockLost(this.key, this.fence, reason, message);
    this.#abort.abort(this.lost);
    try {
      this.#onLost?.(this.lost);
    } catch {
      // the work is stopped by the signal all the same
    }
    this.#answer.close();
  }

  /**
   * Release the lock (one DELETE, however often called) and close the
   * stream. A lock that is gone (lost, or taken from its owner) is recorded
   * in lost rather than thrown.
   */
  release(): Promise<void> {
    this.#releasing ??= this.#release();
    return this.#releasing;
  }

  async #release(): Promise<void> {
    try {
      if (this.lost) {
        return;
      }
      const line = new Promise<void>((resolve) => (this.#releasedLine = resolve));
      try {
        await call(this.#socket, "DELETE", lockPath(this.key) + query({ owner: this.owner }));
      } catch (err) {
        if (!(err instanceof BatonError)) {
          throw err;
        }
        // Not released by this DELETE: the lock is not ours any more.
        this.#end(err.body.reason ?? err.code, err.body.message ?? err.message);
        return;
      }
      this.#released = true;
      clearTimeout(this.#silence);
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([line, new Promise<void>((resolve) => (timer = setTimeout(resolve, 10_000)))]);
      clearTimeout(timer);
    } finally {
      clearTimeout(this.#silence);
      this.#answer.close();
      await this.#following;
    }
  }

  /** `await using lock = await client.hold(...)`: released at the block's end; throws the loss if lost. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
    if (this.lost) {
      throw this.lost;
    }
  }
}
