/**
 * The client: one Unix-socket connection to the daemon, many requests in flight.
 *
 * Every request carries an id its answer echoes, so calls from anywhere in the
 * program pipeline on the one socket and each answer settles its own promise.
 * Appends and Records are kept until the daemon is known to have WRITTEN them
 * (a `written`/`durable` ack, or a Flush of their session answered after them):
 * a `queued` ack only means a daemon holds them in memory. When the daemon goes
 * away (or refuses a write because it is stopping: a restart) the client
 * reconnects (with backoff, up to `reconnectTimeout`) and sends
 * every such batch again in its first order with `resend: true`; the daemon
 * drops the entries it already has (by uuid; an entry without one when a
 * byte-identical line is near the end of its file and no line before it in the
 * batch was new), so nothing acknowledged is lost and nothing is written twice. Other requests in flight then
 * are made once more if they change nothing (`IDEMPOTENT`), else fail with DaemonUnavailable (a caller decides).
 */
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

import {
  DaemonTimeout,
  DaemonUnavailable,
  EntryTooLarge,
  FrameTooLarge,
  ProtocolError,
  SessiondError,
  UnsafeSocketDir,
  VersionMismatch,
  WrongRoot,
  remoteError,
  type LeaseHolder,
} from "./errors.js";
import { DEFAULT_MAX_FRAME, FrameBuffer, PROTOCOL_VERSION, decodeBody, encodeFrame } from "./frames.js";
import type {
  Adopted,
  Appended,
  Done,
  Durability,
  Entries,
  Entry,
  ErrorFrame,
  Flushed,
  Listed,
  Opened,
  Response,
  Searched,
  StatusResult,
  Subscribed,
  TrashChanged,
  Unsubscribed,
  Welcome,
  WriteOptions,
} from "./messages.js";

export const SOCKET_NAME = "sessiond.sock";
/** Requests made once more after a lost connection: they change nothing (a
 * Flush after a resend confirms what was resent). */
const IDEMPOTENT = new Set(["Status", "List", "Search", "Flush", "Usage"]);
/** The most msgpack adds to an entry's bytes in a request (a bin 32 header). */
const ENTRY_OVERHEAD = 5;
/** Above this many bytes acknowledged only `queued` over all its sessions, the
 * client asks for a flush of the session holding the most, which confirms them:
 * what it keeps for resending stays bounded (sessions each under a bound of
 * their own could add up without end). */
export const MAX_UNCONFIRMED_BYTES = 16 * 1024 * 1024;

/** The daemon's socket as the Python client finds it: $SESSIOND_SOCKET, else
 * $XDG_RUNTIME_DIR/sessiond/sessiond.sock, else /tmp/sessiond-<uid>/sessiond.sock. */
export function defaultSocket(): string {
  if (process.env.SESSIOND_SOCKET) return process.env.SESSIOND_SOCKET;
  const runtime = process.env.XDG_RUNTIME_DIR;
  if (runtime && fs.existsSync(runtime) && fs.statSync(runtime).isDirectory()) {
    return path.join(runtime, "sessiond", SOCKET_NAME);
  }
  return path.join("/tmp", `sessiond-${os.userInfo().uid}`, SOCKET_NAME);
}

/** The store root as the Python client finds it: $SESSIOND_ROOT, else $XDG_DATA_HOME/sessiond. */
export function defaultRoot(): string {
  if (process.env.SESSIOND_ROOT) return process.env.SESSIOND_ROOT;
  const data = process.env.XDG_DATA_HOME || path.join(os.homedir(), ".local", "share");
  return path.join(data, "sessiond");
}

export interface ClientOptions {
  /** The daemon's socket (default: `defaultSocket()`). */
  socket?: string;
  /** The store root this client means; a daemon serving another one is `WrongRoot`. */
  root?: string;
  /** Milliseconds a connect, or a request's answer, may take (default 30 s). */
  timeout?: number;
  /** Milliseconds to keep trying to reach a daemon that went away before failing
   * what is owed (default 10 s). */
  reconnectTimeout?: number;
  /** Requests in flight at once; more wait for a slot (default 4096). */
  maxInFlight?: number;
  /** Lines a subscription buffers for a consumer that does not read; past it
   * the subscription fails (default 100,000). */
  maxBufferedLines?: number;
  /** The name the daemon shows for this client. */
  name?: string;
}

/** One Append/Record the client keeps until it is known written. */
interface Batch {
  seq: number;
  op: "Append" | "Record";
  session: string;
  fields: Record<string, unknown>;
  size: number;
  durability: Durability;
}

interface Pending {
  /** The id it was (last) sent with. */
  id: number;
  /** The request's op, for messages. */
  op: string;
  seq: number;
  resolve: (resp: Response) => void;
  reject: (err: Error) => void;
  timer?: NodeJS.Timeout;
  batch?: Batch;
  subscription?: Subscription;
  /** A Flush: the session it confirms ("" for all). */
  flushes?: string;
  /** It holds one of the `maxInFlight` slots (given back once it is settled). */
  slot?: boolean;
}

function checkPrivateDir(dir: string): void {
  const st = fs.lstatSync(dir);
  if (st.isSymbolicLink()) throw new UnsafeSocketDir(`${dir} is a symlink; refusing to use it`);
  if (!st.isDirectory()) throw new UnsafeSocketDir(`${dir} is not a directory`);
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid) throw new UnsafeSocketDir(`${dir} is owned by uid ${st.uid}, not ${uid}`);
  if (st.mode & 0o077) throw new UnsafeSocketDir(`${dir} has mode ${(st.mode & 0o777).toString(8)}; it must be 0700`);
}

/** A lone surrogate (with the `u` flag a pair is one code point, not matched). */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/** Entry `index` as the bytes of its line: bytes as they are, a string's UTF-8
 * (a lone surrogate, which has none, is a TypeError: replacing it would change
 * the line), an object as `JSON.stringify` gives it (a value JSON has no form
 * for is a TypeError naming the entry and the field). */
function entryBytes(entry: Entry, index: number): Uint8Array {
  if (entry instanceof Uint8Array) return entry;
  if (typeof entry === "string") {
    if (LONE_SURROGATE.test(entry)) {
      throw new TypeError(`entry ${index} is a string holding a lone surrogate, which has no UTF-8 form; ` +
        "send it as an object (JSON.stringify escapes it) or as bytes");
    }
    return Buffer.from(entry, "utf-8");
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(entry);
  } catch (err) {
    throw unencodable(entry, index, err as Error);
  }
  if (typeof text !== "string") throw new TypeError(`entry ${index} is ${typeof entry}, which JSON has no form for; not sent`);
  return Buffer.from(text, "utf-8");
}

/** The TypeError for an entry `JSON.stringify` threw on: a BigInt is named by
 * its path in the entry (a second pass, taken only on failure). */
function unencodable(entry: unknown, index: number, why: Error): TypeError {
  const paths = new WeakMap<object, string>();
  let bigint: string | null = null;
  try {
    JSON.stringify(entry, function (this: object, key: string, value: unknown) {
      const at = paths.has(this) ? `${paths.get(this)}${Array.isArray(this) ? `[${key}]` : `.${key}`}` : "";
      if (typeof value === "bigint") {
        bigint = at || "the entry";
        throw why;
      }
      if (value !== null && typeof value === "object") paths.set(value, at);
      return value;
    });
  } catch {
    // `why` again, now located
  }
  const what = bigint !== null ? `${bigint} is a BigInt, which JSON has no form for` : why.message;
  return new TypeError(`entry ${index}: ${what}; not sent`);
}

/** The longest wait a Node timer takes (ms); a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Option `name`'s `value`, a number from `min` to `max` (an integer when
 * `integer`); anything else is a RangeError naming it. */
function option(name: string, value: number, min: number, max: number, integer = false): number {
  if (typeof value !== "number" || Number.isNaN(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
    throw new RangeError(`${name} must be ${integer ? "an integer" : "a number"} from ${min} to ${max}, not ${String(value)}`);
  }
  return value;
}

/** The DaemonUnavailable of a write that was sent: the daemon may have written it. */
function maybeWritten(message: string): DaemonUnavailable {
  const err = new DaemonUnavailable(message);
  err.maybeWritten = true;
  return err;
}

function realpathOr(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

export class Client {
  readonly socketPath: string;
  readonly root: string | undefined;
  readonly timeout: number;
  readonly reconnectTimeout: number;
  readonly maxInFlight: number;
  readonly maxBufferedLines: number;
  readonly name: string;
  /** The daemon's Welcome, once connected. */
  welcome: Welcome | null = null;
  /** The daemon's frame cap: requests are sized to fit under it. */
  maxFrameBytes = DEFAULT_MAX_FRAME;

  private sock: net.Socket | null = null;
  private connecting: Promise<void> | null = null;
  private reconnecting: Promise<void> | null = null;
  private closed = false;
  private nextId = 1;
  private seq = 0;
  private pending = new Map<number, Pending>();
  /** Callers waiting for one of the `maxInFlight` slots, and how many are taken. */
  private slots: (() => void)[] = [];
  private active = 0;
  /** Acknowledged `queued`, not known written: resent after a reconnect. */
  private unconfirmed: Batch[] = [];
  /** Their bytes per session, and over all sessions, not counting a session
   * whose flush has been asked for. */
  private unconfirmedBytes = new Map<string, number>();
  private heldBytes = 0;

  constructor(options: ClientOptions = {}) {
    this.socketPath = options.socket ?? defaultSocket();
    this.root = options.root;
    this.timeout = option("timeout", options.timeout ?? 30_000, 1, MAX_TIMER_MS);
    this.reconnectTimeout = option("reconnectTimeout", options.reconnectTimeout ?? 10_000, 0, Infinity);
    this.maxInFlight = option("maxInFlight", options.maxInFlight ?? 4096, 1, Number.MAX_SAFE_INTEGER, true);
    this.maxBufferedLines = option("maxBufferedLines", options.maxBufferedLines ?? 100_000, 1, Number.MAX_SAFE_INTEGER, true);
    this.name = options.name ?? "sessiond-node";
  }

  // ------------------------------------------------------------------ connection

  /** Connect and shake hands (idempotent); the daemon's Welcome. */
  async connect(): Promise<Welcome> {
    if (this.closed) throw new DaemonUnavailable("the client is closed");
    if (this.sock === null) {
      this.connecting ??= this.dialAndGreet().finally(() => {
        this.connecting = null;
      });
      await this.connecting;
    }
    return this.welcome!;
  }

  /** The daemon's Welcome once connected, as every request waits for it: a
   * daemon this client had that went away (restarting) is waited for, up to
   * `reconnectTimeout` (`connect()` alone fails at once while it is away). */
  async ready(): Promise<Welcome> {
    await this.connected();
    return this.welcome!;
  }

  /** Close the connection; what is still owed fails with DaemonUnavailable
   * (a write that was sent with `maybeWritten`). Bytes the daemon has not
   * taken yet (it is stalled) are dropped, not waited for: their callers have
   * just been failed. */
  async close(): Promise<void> {
    this.closed = true;
    const sock = this.sock;
    this.sock = null;
    this.failAll(new DaemonUnavailable("the client was closed"), true);
    this.unconfirmed = [];
    if (sock === null) return;
    if (sock.writableLength > 0) sock.destroy();
    else await new Promise<void>((resolve) => sock.end(resolve));
  }

  /** Connected, for a request: once this client has had a daemon, one that
   * went away (restarting) is waited for, with backoff, up to `reconnectTimeout`.
   * Every waiter shares one wait and resumes in the order it came (a promise's
   * reactions run in order), after the resend of what was owed: writes made
   * while the daemon was away keep their call order. */
  private connected(): Promise<unknown> {
    if (this.sock !== null) return Promise.resolve();
    if (this.welcome === null) return this.connect();
    this.reconnecting ??= this.retryConnect().finally(() => {
      this.reconnecting = null;
    });
    return this.reconnecting;
  }

  private async retryConnect(): Promise<void> {
    const deadline = Date.now() + this.reconnectTimeout;
    let delay = 50;
    for (;;) {
      try {
        await this.connect();
        return;
      } catch (err) {
        if (this.closed || !(err instanceof DaemonUnavailable) || err instanceof UnsafeSocketDir || Date.now() + delay > deadline) throw err;
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 1000);
      }
    }
  }

  private async dialAndGreet(): Promise<void> {
    const sock = await this.dial();
    if (this.closed) {
      // close() came while dialing: this connection is nobody's.
      sock.destroy();
      throw new DaemonUnavailable("the client was closed");
    }
    const frames = new FrameBuffer(DEFAULT_MAX_FRAME);
    this.sock = sock;
    sock.on("data", (data: Buffer) => {
      if (this.sock !== sock) return;
      let bodies: Uint8Array[];
      try {
        bodies = frames.feed(data);
      } catch (err) {
        sock.destroy();
        this.lost(sock, err as Error);
        return;
      }
      for (const body of bodies) {
        if (this.sock !== sock) return; // an answer lost it (a stopping daemon): the rest is stale
        try {
          this.dispatch(decodeBody(body) as unknown as Response);
        } catch (err) {
          sock.destroy();
          this.lost(sock, err as Error);
          return;
        }
      }
    });
    sock.on("close", () => this.lost(sock, new DaemonUnavailable("the daemon closed the connection")));
    sock.on("error", () => {}); // "close" follows and reports it
    let welcome: Welcome;
    try {
      welcome = (await this.request({ op: "Hello", protocol_version: PROTOCOL_VERSION, client: this.name, pid: process.pid }, 0)) as Welcome;
    } catch (err) {
      this.sock = null;
      sock.destroy();
      throw err;
    }
    if (welcome.protocol_version !== PROTOCOL_VERSION) {
      this.sock = null;
      sock.destroy();
      throw new VersionMismatch(`the daemon speaks protocol ${welcome.protocol_version}, this client ${PROTOCOL_VERSION}`);
    }
    if (this.root !== undefined && welcome.root && realpathOr(welcome.root) !== realpathOr(this.root)) {
      this.sock = null;
      sock.destroy();
      throw new WrongRoot(`the daemon on ${this.socketPath} serves ${welcome.root}, not ${this.root}; nothing sent to it`);
    }
    this.welcome = welcome;
    this.holdOpen();
    this.maxFrameBytes = welcome.max_frame_bytes || DEFAULT_MAX_FRAME;
    frames.maxFrame = Math.max(this.maxFrameBytes, DEFAULT_MAX_FRAME);
  }

  private dial(): Promise<net.Socket> {
    try {
      checkPrivateDir(path.dirname(this.socketPath));
      const st = fs.lstatSync(this.socketPath);
      if (!st.isSocket()) throw new DaemonUnavailable(`${this.socketPath} is not a socket`);
      const uid = process.getuid?.();
      if (uid !== undefined && st.uid !== uid) {
        throw new DaemonUnavailable(`${this.socketPath} is owned by uid ${st.uid}; refusing to talk to it`);
      }
    } catch (err) {
      if (err instanceof SessiondError) return Promise.reject(err);
      return Promise.reject(new DaemonUnavailable(`no daemon is running on ${this.socketPath}: ${(err as Error).message}`));
    }
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ path: this.socketPath });
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new DaemonTimeout(`connecting to ${this.socketPath} took over ${this.timeout} ms`));
      }, this.timeout);
      sock.once("connect", () => {
        clearTimeout(timer);
        sock.removeAllListeners("error");
        resolve(sock);
      });
      sock.once("error", (err) => {
        clearTimeout(timer);
        reject(new DaemonUnavailable(`cannot reach the daemon on ${this.socketPath}: ${err.message}`));
      });
    });
  }

  /** The connection `sock` is gone: fail what cannot be replayed, then
   * reconnect and resend the writes not known written. */
  private lost(sock: net.Socket, why: Error): void {
    if (this.sock !== sock) return;
    this.sock = null;
    const err = why instanceof DaemonUnavailable ? why : new DaemonUnavailable(`lost the daemon: ${why.message}`);
    const owed = this.failAll(err, false);
    if (this.closed || (owed.length === 0 && this.unconfirmed.length === 0)) return;
    void this.recover(owed);
  }

  /** Fail every request in flight but the writes (returned, for resending),
   * unless `everything`. */
  private failAll(err: Error, everything: boolean): Pending[] {
    const owed: Pending[] = [];
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      if (p.batch && !everything) {
        owed.push(p);
        continue;
      }
      clearTimeout(p.timer);
      this.release(p);
      if (p.subscription) p.subscription.fail(err);
      p.reject(p.batch && err instanceof DaemonUnavailable ? maybeWritten(err.message) : err);
    }
    return owed;
  }

  private async recover(owed: Pending[]): Promise<void> {
    try {
      await this.connected();
    } catch (err) {
      // They were sent to the lost daemon: it may have written them.
      const failed = maybeWritten((err as Error).message);
      for (const p of owed) {
        clearTimeout(p.timer);
        this.release(p);
        p.reject(failed);
      }
      this.unconfirmed = [];
      this.forget("");
      return;
    }
    // Everything not known written, in its first order: the acknowledged ones
    // answer nobody (their promises are settled), the owed ones their callers.
    const again: { batch: Batch; owner?: Pending }[] = [
      ...this.unconfirmed.map((batch) => ({ batch })),
      ...owed.map((p) => ({ batch: p.batch!, owner: p })),
    ].sort((a, b) => a.batch.seq - b.batch.seq);
    this.unconfirmed = [];
    this.forget("");
    // All sent now, in one go, before any new request: the daemon sees them in order.
    for (const { batch, owner } of again) {
      const id = this.nextId++;
      const p: Pending = owner ?? { id, op: batch.op, seq: batch.seq, batch, resolve: () => {}, reject: () => {} };
      p.id = id;
      this.arm(p);
      this.pending.set(id, p);
      try {
        this.send({ op: batch.op, ...batch.fields, id, resend: true });
      } catch (err) {
        this.finish(id, p);
        p.reject(err as Error);
      }
    }
    this.holdOpen();
  }

  private dispatch(resp: Response): void {
    const p = this.pending.get(resp.id);
    if (p === undefined) {
      if (resp.id === 0 && resp.op === "Error") {
        // A connection-level refusal answers everything in flight.
        const e = resp as ErrorFrame;
        this.failAll(remoteError(e.code, e.message, e.holder ?? null), true);
      } else if (resp.op === "Subscribed") {
        // A Subscribe given up on (its timeout passed): nobody reads the stream.
        void this.unsubscribe(resp.id).catch(() => {});
      }
      return;
    }
    if (p.subscription && resp.op !== "Subscribed" && resp.op !== "Error") {
      if (resp.op === "Unsubscribed") {
        this.finish(resp.id, p);
        p.subscription.end((resp as Unsubscribed).reason);
      } else if (resp.op === "Entries") {
        p.subscription.push(resp as Entries);
      }
      return;
    }
    if (resp.op === "Error" && (resp as ErrorFrame).code === "shutting_down" && (p.batch || p.flushes !== undefined) && this.sock) {
      // The daemon is stopping (a restart): as when it is gone, the write is
      // kept and resent on the next daemon, the flush made again there.
      const sock = this.sock;
      sock.destroy();
      this.lost(sock, new DaemonUnavailable((resp as ErrorFrame).message));
      return;
    }
    if (!p.subscription || resp.op === "Error") this.finish(resp.id, p);
    if (resp.op === "Error") {
      const e = resp as ErrorFrame;
      const err = remoteError(e.code, e.message, e.holder ?? null);
      p.subscription?.fail(err);
      p.reject(err);
      return;
    }
    clearTimeout(p.timer);
    if (p.batch) this.written(p.batch, resp as Appended);
    if (p.flushes !== undefined) this.confirm(p.flushes, p.seq);
    p.resolve(resp);
  }

  private finish(id: number, p: Pending): void {
    this.pending.delete(id);
    clearTimeout(p.timer);
    this.release(p);
    this.holdOpen();
  }

  /** The connection keeps the process alive only while something is owed on it:
   * a program that is done exits without closing its store. */
  private holdOpen(): void {
    if (this.pending.size) this.sock?.ref();
    else this.sock?.unref();
  }

  // -------------------------------------------------------------------- requests

  private send(message: Record<string, unknown>): void {
    const frame = encodeFrame(message);
    if (frame.length - 4 > this.maxFrameBytes) {
      throw new FrameTooLarge(`a ${message.op} of ${frame.length} bytes is over the daemon's frame cap of ${this.maxFrameBytes}`);
    }
    this.sock!.write(frame);
  }

  /** One of the `maxInFlight` slots, taken at once or handed over by
   * `release`; DaemonTimeout when none is free within `timeout` (the wait
   * counts in the call's timeout). */
  private acquire(): Promise<void> {
    if (this.active < this.maxInFlight) {
      this.active++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const granted = (): void => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.slots.splice(this.slots.indexOf(granted), 1);
        reject(new DaemonTimeout(`no answer freed one of the ${this.maxInFlight} request slots within ${this.timeout} ms`));
      }, this.timeout);
      this.slots.push(granted);
    });
  }

  /** Give back `p`'s slot, if it holds one. */
  private release(p: Pending): void {
    if (!p.slot) return;
    p.slot = false;
    this.giveBack();
  }

  /** A slot given back: to the first caller waiting for one, else free. */
  private giveBack(): void {
    const next = this.slots.shift();
    if (next) next();
    else this.active--;
  }

  /** Start (or restart) `p`'s wait for its answer: past `timeout` it fails
   * with DaemonTimeout. A write that timed out may still land: it is kept for
   * a resend, and its error says so (`maybeWritten`: a caller's retry of it
   * must go with `resend`, or what lands of both is written twice). A write
   * owed across a reconnect is not failed by it (it is not in flight then; the
   * reconnect's own deadline governs it). */
  private arm(p: Pending, ms: number = this.timeout): void {
    clearTimeout(p.timer);
    p.timer = setTimeout(() => {
      if (this.pending.get(p.id) !== p) return;
      this.finish(p.id, p);
      if (p.batch) this.keep(p.batch);
      const err = new DaemonTimeout(`the daemon did not answer a ${p.op} within ${this.timeout} ms`);
      err.maybeWritten = p.batch !== undefined;
      p.subscription?.fail(err);
      p.reject(err);
    }, ms);
  }

  /** Send one request (the client adds its id) and wait for its answer. */
  private async request(message: Record<string, unknown>, id?: number, extra: Partial<Pending> = {}): Promise<Response> {
    let wait = this.timeout;
    let slot = false;
    if (id === undefined) {
      await this.connected();
      const asked = Date.now();
      await this.acquire();
      slot = true;
      wait = Math.max(0, this.timeout - (Date.now() - asked));
      try {
        await this.connected();
      } catch (err) {
        this.giveBack();
        throw err;
      }
      id = this.nextId++;
    }
    const seq = extra.batch?.seq ?? ++this.seq;
    return new Promise<Response>((resolve, reject) => {
      const p: Pending = { id: id!, op: String(message.op), seq, resolve, reject, slot, ...extra };
      this.arm(p, wait);
      this.pending.set(id!, p);
      this.holdOpen();
      try {
        this.send({ ...message, id });
      } catch (err) {
        this.finish(id!, p);
        reject(err);
      }
    });
  }

  /** Any request, as the wire has it (`op` and its fields; the id is added);
   * resolves to the answer, or rejects with the typed error of an Error frame. */
  call<T extends Response = Response>(message: { op: string; [field: string]: unknown }): Promise<T> {
    if (IDEMPOTENT.has(message.op)) return this.again(() => this.request(message)) as Promise<T>;
    return this.request(message) as Promise<T>;
  }

  /** `send()`, made once more when the connection was lost while it was in
   * flight (the second waits for the daemon to be back): for requests that
   * change nothing, or nothing twice. */
  private async again(send: () => Promise<Response>): Promise<Response> {
    try {
      return await send();
    } catch (err) {
      if (!(err instanceof DaemonUnavailable) || err instanceof DaemonTimeout || this.closed) throw err;
      return await send();
    }
  }

  // ----------------------------------------------------------------------- writes

  private write(batch: Batch, fields: Record<string, unknown>): Promise<Appended> {
    return this.request({ op: batch.op, ...fields }, undefined, { batch }) as Promise<Appended>;
  }

  /** An ack of `batch`: a `written`/`durable` one confirms every earlier batch
   * of its session; a `queued` one is kept until something does. */
  private written(batch: Batch, _resp: Appended): void {
    if (batch.durability === "queued") this.keep(batch);
    else this.confirm(batch.session, batch.seq);
  }

  private keep(batch: Batch): void {
    this.unconfirmed.push(batch);
    this.unconfirmedBytes.set(batch.session, (this.unconfirmedBytes.get(batch.session) ?? 0) + batch.size);
    this.heldBytes += batch.size;
    while (this.heldBytes > MAX_UNCONFIRMED_BYTES) {
      let largest = "";
      let most = 0;
      for (const [session, bytes] of this.unconfirmedBytes) {
        if (bytes > most) [largest, most] = [session, bytes];
      }
      if (most === 0) break;
      this.forget(largest);
      void this.flush(largest).catch(() => {});
    }
  }

  /** Batches of `session` ("": every session) sent before `seq` are written. */
  private confirm(session: string, seq: number): void {
    this.unconfirmed = this.unconfirmed.filter((b) => !(b.seq < seq && (session === "" || b.session === session)));
    this.forget(session);
  }

  /** Stop counting the bytes kept of `session` ("": of every session). */
  private forget(session: string): void {
    if (session === "") {
      this.unconfirmedBytes.clear();
      this.heldBytes = 0;
    } else {
      this.heldBytes -= this.unconfirmedBytes.get(session) ?? 0;
      this.unconfirmedBytes.delete(session);
    }
  }

  /** Fit `lines` into requests under the frame cap; an entry that cannot fit
   * in any frame is EntryTooLarge, and nothing of the call is sent. */
  private split(op: "Append" | "Record", fields: Record<string, unknown>, lines: Uint8Array[]): Uint8Array[][] {
    const overhead = encodeFrame({ op, id: Number.MAX_SAFE_INTEGER, ...fields, resend: true, parent: "x".repeat(64) }).length + 64;
    const budget = this.maxFrameBytes - overhead;
    for (const line of lines) {
      if (line.length + ENTRY_OVERHEAD > budget) {
        throw new EntryTooLarge(`entry of ${line.length} bytes is over the daemon's frame cap of ${this.maxFrameBytes} bytes ` +
          `(${budget - ENTRY_OVERHEAD} bytes at most for one entry); not sent`);
      }
    }
    const out: Uint8Array[][] = [];
    let batch: Uint8Array[] = [];
    let used = 0;
    for (const line of lines) {
      const cost = line.length + ENTRY_OVERHEAD;
      if (batch.length && (used + cost > budget || batch.length >= 100_000)) {
        out.push(batch);
        batch = [];
        used = 0;
      }
      batch.push(line);
      used += cost;
    }
    if (batch.length || out.length === 0) out.push(batch);
    return out;
  }

  private async writeAll(op: "Append" | "Record", key: string, fields: Record<string, unknown>, entries: Entry[]): Promise<Appended> {
    const lines = entries.map((entry, i) => entryBytes(entry, i));
    await this.connected();
    const durability = (fields.durability as Durability | undefined) ?? "queued";
    const parts = this.split(op, fields, lines);
    const answers = await Promise.all(parts.map((part) => {
      const body = { ...fields, [key]: part };
      const batch: Batch = { seq: ++this.seq, op, session: String(fields.session), fields: body, size: part.reduce((n, l) => n + l.length, 0), durability };
      return this.write(batch, body);
    }));
    const last = answers[answers.length - 1];
    return {
      op: "Appended",
      id: last.id,
      accepted: answers.reduce((n, a) => n + a.accepted, 0),
      duplicates: answers.reduce((n, a) => n + (a.duplicates ?? 0), 0),
      last: last.last ?? null,
      pending: last.pending ?? 0,
    };
  }

  /** Store raw entries as they are (deduplicated by uuid and routed by the daemon). */
  append(session: string, cwd: string, entries: Entry[], options: WriteOptions = {}): Promise<Appended> {
    return this.writeAll("Append", "entries", { session, cwd, ...options }, entries);
  }

  /** Messages to chain: the daemon stamps `parentUuid` on each, after `parent`
   * (else the session's last recorded participant); `last` is the next hint. */
  record(session: string, cwd: string, messages: Entry[], options: Omit<WriteOptions, "exact" | "project"> & { parent?: string } = {}): Promise<Appended> {
    return this.writeAll("Record", "messages", { session, cwd, ...options }, messages);
  }

  /** Resolves once everything accepted before it (of `session`, or all) is
   * written, and fdatasync'ed when `durable`. */
  flush(session?: string, durable = false): Promise<Flushed> {
    const message = { op: "Flush", session, durable: durable || undefined };
    return this.again(() => this.request(message, undefined, { flushes: session ?? "" })) as Promise<Flushed>;
  }

  // ------------------------------------------------------------------ the others

  status(): Promise<StatusResult> {
    return this.call<StatusResult>({ op: "Status" });
  }

  /** Sessions of some project dirs (names under projects/, or paths), or of every project. */
  async list(options: { dirs?: string[]; all?: boolean; limit?: number; offset?: number } = {}): Promise<Listed> {
    return this.call<Listed>({ op: "List", ...options });
  }

  search(query: string, options: { dirs?: string[]; all?: boolean; limit?: number; since?: string; role?: string } = {}): Promise<Searched> {
    return this.call<Searched>({ op: "Search", query, ...options });
  }

  open(session: string, cwd: string, options: { lease?: boolean; takeOver?: boolean } = {}): Promise<Opened> {
    return this.call<Opened>({ op: "Open", session, cwd, lease: options.lease, take_over: options.takeOver });
  }

  adopt(session: string, filePath: string, options: { lease?: boolean; takeOver?: boolean; refuseLive?: boolean } = {}): Promise<Adopted> {
    return this.call<Adopted>({ op: "Adopt", session, path: filePath, lease: options.lease, take_over: options.takeOver, refuse_live: options.refuseLive });
  }

  /** Detach from a session; answered once everything accepted for it is written. */
  closeSession(session: string): Promise<Done> {
    return this.call<Done>({ op: "Close", session });
  }

  setAgentMeta(session: string, cwd: string, agent: string, meta: Record<string, unknown>, run?: string): Promise<Done> {
    return this.call<Done>({ op: "SetAgentMeta", session, cwd, agent, meta: Buffer.from(JSON.stringify(meta)), run });
  }

  /** Move a session (its transcript at `path`, its `<id>/` dir) into the trash. */
  trash(session: string, filePath: string, options: { force?: boolean; reason?: string } = {}): Promise<TrashChanged> {
    return this.call<TrashChanged>({ op: "Trash", session, path: filePath, force: options.force, reason: options.reason });
  }

  restore(session: string): Promise<TrashChanged> {
    return this.call<TrashChanged>({ op: "Restore", session });
  }

  /** Stream a session's entries as they are written (see `Subscription`). */
  async subscribe(session: string, options: { cwd?: string; path?: string; offset?: number; last?: number; agents?: boolean } = {}): Promise<Subscription> {
    const sub = new Subscription(this, this.maxBufferedLines);
    const answer = (await this.request({ op: "Subscribe", session, ...options }, undefined, { subscription: sub })) as Subscribed;
    sub.started(answer);
    return sub;
  }

  /** @internal */
  unsubscribe(id: number): Promise<Response> {
    return this.call({ op: "Unsubscribe", subscription: id });
  }

  /** Requests in flight and writes kept for a resend (for tests and status). */
  get inFlight(): { requests: number; unconfirmed: number } {
    return { requests: this.pending.size, unconfirmed: this.unconfirmed.length };
  }
}

/**
 * A live stream of a session's lines: `for await (const e of sub)` yields each
 * `Entries` frame (lines of one file, from `offset`) until the daemon ends it
 * (`reason`) or `close()`.
 */
export class Subscription implements AsyncIterable<Entries> {
  /** The Subscribe's id, the session, and where the main transcript's stream starts. */
  id = 0;
  session = "";
  path = "";
  offset = 0;
  /** Why the daemon ended the stream, once it did. */
  reason: string | null = null;
  private queue: Entries[] = [];
  private buffered = 0;
  private waiter: (() => void) | null = null;
  private error: Error | null = null;

  constructor(private readonly client: Client, private readonly maxBufferedLines: number) {}

  /** @internal */
  started(answer: Subscribed): void {
    this.id = answer.id;
    this.session = answer.session;
    this.path = answer.path;
    this.offset = answer.offset;
    if (this.error !== null) this.cancel(); // it overflowed before its answer was read
  }

  /** @internal */
  push(frame: Entries): void {
    if (this.reason !== null || this.error !== null) return;
    this.queue.push(frame);
    this.buffered += frame.lines.length;
    if (this.buffered > this.maxBufferedLines) {
      this.fail(new SessiondError(`a subscription's consumer fell over ${this.maxBufferedLines} lines behind`, "busy"));
      this.cancel();
    }
    this.wake();
  }

  /** @internal */
  end(reason: string): void {
    this.reason ??= reason;
    this.wake();
  }

  /** @internal */
  fail(err: Error): void {
    this.error ??= err;
    this.wake();
  }

  /** Have the daemon end the stream (once its id is known): its Unsubscribed
   * settles the Subscribe, which holds a slot and the process open till then. */
  private cancel(): void {
    if (this.id !== 0) void this.client.unsubscribe(this.id).catch(() => {});
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  /** Cancel the stream (the daemon answers Unsubscribed). */
  async close(): Promise<void> {
    if (this.reason !== null || this.error !== null || this.id === 0) {
      this.end("closed");
      return;
    }
    try {
      await this.client.unsubscribe(this.id);
    } catch {
      // the connection is gone: so is the stream
    }
    this.end("closed");
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Entries> {
    for (;;) {
      const next = this.queue.shift();
      if (next) {
        this.buffered -= next.lines.length;
        yield next;
        continue;
      }
      if (this.error) throw this.error;
      if (this.reason !== null) return;
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }
}

export type { LeaseHolder, ProtocolError };
