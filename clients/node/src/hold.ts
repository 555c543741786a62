// Hold: a lock held through a hold stream, whose AbortSignal aborts the
// moment the lock may be lost.
import type { Event } from "./api.js";
import { BatonError, LockLost, SILENT, STREAM_ENDED } from "./errors.js";
import { type Answer, call, lockPath, parse, query, validFor } from "./wire.js";

/** What a hold is told of. */
export interface HoldOptions {
  /** Called once with the loss, as the signal aborts. An error it throws is ignored. */
  onLost?: (lost: LockLost) => void;
}

/** The codes of a release refused because the lock is no longer the owner's. */
const gone = new Set(["lock_lost", "not_held", "not_owner"]);

/**
 * A lock held through a hold stream (Client.hold): the sidecar renews it
 * for as long as the hold lasts. `signal` aborts, with a LockLost as its
 * reason, the moment the lock may be lost: a lost line, the stream's end
 * without a last line (stream_ended), no line before the last one's
 * valid_for_seconds ran out, counted from its at (silent), or a release by
 * another caller of the same owner (released). It aborts too, with a
 * BatonError (released), when release() begins. Pass it to whatever the
 * work does (fetch, timers, child processes, database queries), and check
 * it before each write.
 */
export class Hold {
  /** The lock's key. */
  readonly key: string;
  /** The stream's granted event. */
  readonly grant: Event;
  /** Aborts with a LockLost when the lock may be lost, with a BatonError (released) once released. */
  readonly signal: AbortSignal;
  /** The loss, once the lock may be lost; undefined while held or once released by release(). */
  lost: LockLost | undefined;

  readonly #socket: string;
  readonly #answer: Answer;
  readonly #abort = new AbortController();
  readonly #onLost?: (lost: LockLost) => void;
  #silence: NodeJS.Timeout | undefined;
  #releasing: Promise<void> | undefined;
  #releasedLine: (() => void) | undefined;
  #sawReleased = false;
  readonly #following: Promise<void>;

  readonly #path: (key: string) => string;

  /** @internal Client.hold and Client.lead make holds; path is where the lock (or leadership) is let go. */
  constructor(socket: string, key: string, grant: Event, answer: Answer, options: HoldOptions = {}, path: (key: string) => string = lockPath) {
    this.#socket = socket;
    this.#path = path;
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
    return !this.#abort.signal.aborted;
  }

  /** Throw the LockLost (or the release) once the lock may be lost or was released: call it before each step that writes. */
  check(): void {
    this.#abort.signal.throwIfAborted();
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
      for (let line = await this.#answer.next(); line !== undefined; line = await this.#answer.next()) {
        if (line === "") {
          continue;
        }
        const event = parse<Event>(line);
        switch (event.event) {
          case "released":
            this.#sawReleased = true;
            // Released by a DELETE that release() did not send: the lock is
            // not this holder's any more.
            this.#end("released", "the lock was released by another caller with its owner");
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

  /**
   * The lock may be lost: say why, and abort the signal. The stream stays
   * open until release(): on a shutdown, the sidecar keeps the lock until
   * the work has stopped and its holder hung up.
   */
  #end(reason: string, message: string): void {
    if (this.#abort.signal.aborted) {
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
  }

  /**
   * Release the lock (at most one DELETE, however often called, and none
   * once the lock is gone) and close the stream. A lock found gone (lost,
   * or taken from its owner) is recorded in lost rather than thrown; any
   * other error of the DELETE rejects, after the stream is closed, which
   * lets the lock go.
   */
  release(): Promise<void> {
    this.#releasing ??= this.#release();
    return this.#releasing;
  }

  async #release(): Promise<void> {
    try {
      if (this.#abort.signal.aborted) {
        return; // lost, or released by another: nothing of this holder's to release
      }
      clearTimeout(this.#silence);
      const line = new Promise<void>((resolve) => (this.#releasedLine = resolve));
      this.#abort.abort(new BatonError("released", `lock ${JSON.stringify(this.key)} released by its holder`));
      try {
        await call(this.#socket, "DELETE", this.#path(this.key) + query({ owner: this.owner }));
      } catch (err) {
        if (err instanceof BatonError && gone.has(err.code)) {
          this.lost = new LockLost(this.key, this.fence, err.body.reason ?? err.code, err.body.message ?? err.message);
          try {
            this.#onLost?.(this.lost);
          } catch {
            // as in #end
          }
          return;
        }
        throw err;
      }
      if (!this.#sawReleased) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([line, new Promise<void>((resolve) => (timer = setTimeout(resolve, 10_000)))]);
        clearTimeout(timer);
      }
    } finally {
      clearTimeout(this.#silence);
      this.#answer.close();
      await this.#following;
    }
  }

  /** Release it at the end of a block (`await using` in TypeScript); throws the LockLost if it was lost. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
    if (this.lost) {
      throw this.lost;
    }
  }
}
