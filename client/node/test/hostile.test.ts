/**
 * The wire client used as a demanding program would, against real daemons:
 * stopped, frozen, restarted gracefully, behind an unsafe socket dir, with
 * entries JSON cannot carry and more calls at once than slots.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";

import { Client, DaemonTimeout, DaemonUnavailable, MAX_UNCONFIRMED_BYTES, UnsafeSocketDir, type Appended } from "../src/index.js";
import { Daemon } from "./daemon.js";

const CWD = "/tmp/proj-h";
const PROJECT = "-tmp-proj-h";

function user(text: string): Record<string, unknown> {
  return { type: "user", uuid: randomUUID(), message: { role: "user", content: text } };
}

function fileLines(d: Daemon, sid: string): string[] {
  const file = path.join(d.root, "projects", PROJECT, `${sid}.jsonl`);
  return fs.existsSync(file) ? fs.readFileSync(file, "utf-8").split("\n").filter((l) => l) : [];
}

/** `p`, or a failure naming `what` if it has not settled within `ms` (a bound on a wait, not a measure). */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

describe("the client's options", () => {
  it("refuses a timeout no timer can wait (it would fire at once) and slots or bounds under one", () => {
    for (const timeout of [Infinity, 2 ** 31, 0, -5, NaN]) {
      assert.throws(() => new Client({ timeout }), (err: unknown) => err instanceof RangeError && /timeout/.test(err.message), String(timeout));
    }
    for (const reconnectTimeout of [-1, NaN]) {
      assert.throws(() => new Client({ reconnectTimeout }), (err: unknown) => err instanceof RangeError && /reconnectTimeout/.test(err.message));
    }
    assert.throws(() => new Client({ maxInFlight: 0 }), /maxInFlight/);
    assert.throws(() => new Client({ maxBufferedLines: 0.5 }), /maxBufferedLines/);
    assert.equal(new Client({ timeout: 2 ** 31 - 1, reconnectTimeout: Infinity }).timeout, 2 ** 31 - 1);
    assert.equal(new Client({ reconnectTimeout: 0 }).reconnectTimeout, 0);
  });
});

describe("the wire client under hostile use", { timeout: 90_000 }, () => {
  let daemon: Daemon;
  before(async () => {
    daemon = await new Daemon().start();
  });
  after(async () => {
    await daemon?.dispose();
  });

  it("keeps to maxInFlight for calls made at once, each failing within its own timeout on a frozen daemon", async () => {
    const timeout = 400;
    const client = new Client({ socket: daemon.socket, timeout, maxInFlight: 2 });
    await client.connect();
    daemon.signal("SIGSTOP");
    try {
      const settled: string[] = [];
      const calls = Array.from({ length: 8 }, (_, i) => client.status().then(
        () => settled.push(`${i} answered`),
        (err: unknown) => settled.push(err instanceof DaemonTimeout ? "timeout" : `${i} ${String(err)}`)));
      // Set before any call's timer: it fires after every timer of `timeout` they set.
      const sentinel = new Promise((r) => setTimeout(r, 2 * timeout)).then(() => settled.push("sentinel"));
      await new Promise((r) => setImmediate(r));
      assert.ok(client.inFlight.requests <= 2, `${client.inFlight.requests} requests in flight, maxInFlight 2`);
      await Promise.all([...calls, sentinel]);
      // A call waiting for a slot counts that wait in its timeout: none fails a multiple of it late.
      assert.deepStrictEqual(settled, [...Array(8).fill("timeout"), "sentinel"]);
    } finally {
      daemon.signal("SIGCONT");
      await client.close();
    }
  });

  it("resends, once and in order, writes a stopping daemon refused (a graceful restart loses nothing)", async () => {
    const client = new Client({ socket: daemon.socket, root: daemon.root, reconnectTimeout: 30_000 });
    try {
      const sid = randomUUID();
      const first = user("before the restart");
      await client.append(sid, CWD, [first], { durability: "written", exact: true });
      // Frozen, the daemon reads the Shutdown and the appends after it in one pass: it refuses those.
      daemon.signal("SIGSTOP");
      const shutdown = client.call({ op: "Shutdown" });
      const later = Array.from({ length: 10 }, (_, i) => user(`during the restart ${i}`));
      const answers = Promise.all(later.map((e, i) => client.append(sid, CWD, [e], { durability: i % 2 ? "written" : "queued", exact: true })));
      answers.catch(() => {}); // awaited below
      await new Promise((r) => setTimeout(r, 100));
      await daemon.stop(); // SIGCONT: it reads them, answers the Shutdown, refuses the rest, exits
      await shutdown.catch(() => {});
      await daemon.start();
      const got: Appended[] = await within(answers, 45_000, "the appends");
      assert.equal(got.length, later.length);
      await client.flush(sid);
      assert.deepStrictEqual(fileLines(daemon, sid), [first, ...later].map((e) => JSON.stringify(e)));
    } finally {
      await client.close();
    }
  });

  it("closes at once with requests the frozen daemon never read; each one fails, a sent write as maybe written", async () => {
    const client = new Client({ socket: daemon.socket, timeout: 60_000 });
    await client.connect();
    daemon.signal("SIGSTOP");
    try {
      // More than the socket's buffers hold: bytes are still waiting to be sent.
      const big = Array.from({ length: 24 }, (_, i) => user(`${i} ${"z".repeat(1 << 20)}`));
      const write = client.append(randomUUID(), CWD, big).then(() => null, (err: unknown) => err);
      const status = client.status().then(() => null, (err: unknown) => err);
      await new Promise((r) => setTimeout(r, 200));
      await within(client.close(), 10_000, "close()");
      const [wErr, sErr] = await within(Promise.all([write, status]), 10_000, "the calls in flight");
      assert.ok(wErr instanceof DaemonUnavailable, String(wErr));
      assert.equal(wErr.maybeWritten, true);
      assert.ok(sErr instanceof DaemonUnavailable, String(sErr));
    } finally {
      daemon.signal("SIGCONT");
    }
  });

  it("close() while connecting leaves nothing connected: the connect and every later call fail", async () => {
    const client = new Client({ socket: daemon.socket, root: daemon.root });
    const connecting = client.connect().then(() => null, (err: unknown) => err);
    await client.close();
    assert.ok((await within(connecting, 10_000, "connect()")) instanceof DaemonUnavailable);
    await assert.rejects(within(client.status(), 10_000, "status()"), DaemonUnavailable);
    assert.equal(client.inFlight.requests, 0);
  });

  it("refuses entries JSON cannot carry with a TypeError naming them, sending nothing of the call", async () => {
    const client = new Client({ socket: daemon.socket, root: daemon.root });
    try {
      const sid = randomUUID();
      const ok = user("fine");
      await assert.rejects(client.append(sid, CWD, [ok, { type: "user", message: { usage: { tokens: 10n } } }]),
        (err: unknown) => err instanceof TypeError && /entry 1/.test(err.message) && /\.message\.usage\.tokens/.test(err.message) && /BigInt/.test(err.message));
      await assert.rejects(client.append(sid, CWD, [ok, undefined as unknown as string]),
        (err: unknown) => err instanceof TypeError && /entry 1/.test(err.message));
      // A string is sent as it is: one holding a lone surrogate has no UTF-8 to send.
      const raw = `{"type":"user","uuid":"${randomUUID()}","message":{"role":"user","content":"cut \ud83d"}}`;
      await assert.rejects(client.append(sid, CWD, [ok, raw]),
        (err: unknown) => err instanceof TypeError && /entry 1/.test(err.message) && /surrogate/.test(err.message));
      // An object's lone surrogate is escaped by JSON.stringify: it round-trips.
      const cut = user("cut \ud83d, joined \ud83d\ude00, separators \u2028\u2029");
      await client.append(sid, CWD, [ok, cut], { durability: "written" });
      const lines = fileLines(daemon, sid);
      assert.deepStrictEqual(lines, [JSON.stringify(ok), JSON.stringify(cut)]);
      assert.deepStrictEqual(JSON.parse(lines[1]), cut);
    } finally {
      await client.close();
    }
  });

  it("bounds what it keeps for resending over all its sessions, not per session", async () => {
    const client = new Client({ socket: daemon.socket, root: daemon.root });
    try {
      const entry = user("q".repeat(200_000));
      const size = Buffer.byteLength(JSON.stringify(entry));
      // Each session's `queued` batch is far under the bound; together they are far over it.
      const sessions = Math.ceil((3 * MAX_UNCONFIRMED_BYTES) / size);
      for (let i = 0; i < sessions; i++) await client.append(randomUUID(), CWD, [{ ...entry, uuid: randomUUID() }]);
      for (let i = 0; client.inFlight.requests > 0 && i < 500; i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(client.inFlight.requests, 0, "the flushes it asked for were answered");
      assert.ok(client.inFlight.unconfirmed * size <= MAX_UNCONFIRMED_BYTES,
        `${client.inFlight.unconfirmed} batches of ${size} bytes kept for resending, over ${MAX_UNCONFIRMED_BYTES}`);
    } finally {
      await client.close();
    }
  });

  it("ends, at the daemon too, a subscription whose consumer fell behind (nothing left owed)", async () => {
    const client = new Client({ socket: daemon.socket, root: daemon.root, maxBufferedLines: 10 });
    try {
      const sid = randomUUID();
      await client.append(sid, CWD, [user("first")], { durability: "written" });
      const sub = await client.subscribe(sid, { cwd: CWD });
      await client.append(sid, CWD, Array.from({ length: 50 }, (_, i) => user(`unread ${i}`)), { durability: "written" });
      await assert.rejects(within((async () => {
        for await (const _ of sub) { /* read only once it overflowed */ }
      })(), 10_000, "the subscription"), /fell over 10 lines behind/);
      // The daemon was told: it ends the stream, and the Subscribe is owed nothing (nor holds the process open).
      for (let i = 0; client.inFlight.requests > 0 && i < 250; i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(client.inFlight.requests, 0);
    } finally {
      await client.close();
    }
  });

  it("ends at the daemon a subscription whose Subscribe it gave up on (answered after its timeout)", async () => {
    const client = new Client({ socket: daemon.socket, root: daemon.root, timeout: 300 });
    try {
      const sid = randomUUID();
      await client.append(sid, CWD, [user("first")], { durability: "written" });
      daemon.signal("SIGSTOP");
      try {
        await assert.rejects(client.subscribe(sid, { cwd: CWD }), DaemonTimeout);
      } finally {
        daemon.signal("SIGCONT");
      }
      let watchers = -1;
      for (let i = 0; watchers !== 0 && i < 100; i++) {
        watchers = (await client.status()).watchers ?? 0; // left out at its default, 0
        if (watchers !== 0) await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(watchers, 0, "the daemon still streams a subscription nobody reads");
    } finally {
      await client.close();
    }
  });

  it("fails at once, not retried, on a socket dir open to others (UnsafeSocketDir, as the Python client)", async () => {
    const client = new Client({ socket: daemon.socket, root: daemon.root, reconnectTimeout: 600_000 });
    const dir = path.dirname(daemon.socket);
    try {
      await client.connect();
      await daemon.kill();
      fs.chmodSync(dir, 0o755);
      const err = await within(client.status().then(() => null, (e: unknown) => e), 20_000, "a call while the socket dir is unsafe");
      assert.ok(err instanceof UnsafeSocketDir, String(err));
      assert.ok(err instanceof DaemonUnavailable);
      assert.equal(err.code, "permission_denied");
      await assert.rejects(new Client({ socket: daemon.socket }).connect(), UnsafeSocketDir);
    } finally {
      fs.chmodSync(dir, 0o700);
      await client.close();
      await daemon.start();
    }
  });
});
