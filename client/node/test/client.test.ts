import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";

import {
  BadRequest,
  Client,
  DaemonTimeout,
  DaemonUnavailable,
  EntryTooLarge,
  FrameBuffer,
  FrameTooLarge,
  LeaseLost,
  NotFound,
  REMOTE_ERRORS,
  RemoteError,
  SessionBusy,
  WrongRoot,
  encodeFrame,
  remoteError,
  type Entries,
} from "../src/index.js";
import { Daemon, PYTHON } from "./daemon.js";

const CWD = "/tmp/proj-a";
const PROJECT = "-tmp-proj-a";

function user(text: string, uuid: string = randomUUID()): string {
  return JSON.stringify({ type: "user", uuid, message: { role: "user", content: text } });
}

function fileOf(d: Daemon, sid: string): string {
  return path.join(d.root, "projects", PROJECT, `${sid}.jsonl`);
}

function lines(file: string): string[] {
  return fs.readFileSync(file, "utf-8").split("\n").filter((l) => l);
}

describe("errors", { timeout: 60_000 }, () => {
  it("has one class per wire code of the daemon's sessiond/wire/errors.py", () => {
    const script = "import json\n" +
      "from sessiond.wire.errors import CODES\n" +
      "print(json.dumps(sorted(CODES)))";
    const out = spawnSync(PYTHON, ["-c", script], { encoding: "utf-8", timeout: 30_000 });
    assert.equal(out.status, 0, out.stderr);
    assert.deepStrictEqual(Object.keys(REMOTE_ERRORS).sort(), JSON.parse(out.stdout));
    const classes = new Set<unknown>();
    for (const [code, cls] of Object.entries(REMOTE_ERRORS)) {
      const err = remoteError(code, "m");
      assert.ok(err instanceof cls && err instanceof RemoteError, code);
      assert.equal(err.code, code);
      classes.add(cls);
    }
    assert.equal(classes.size, Object.keys(REMOTE_ERRORS).length);
    assert.ok(remoteError("lease_lost", "m") instanceof SessionBusy);
    assert.ok(!(remoteError("session_busy", "m") instanceof LeaseLost));
    const unknown = remoteError("from_the_future", "m");
    assert.equal(unknown.constructor, RemoteError);
    assert.equal(unknown.code, "from_the_future");
  });

  it("refuses a frame header over the cap before its body arrives", () => {
    const frames = new FrameBuffer(1024);
    const header = Buffer.alloc(4);
    header.writeUInt32BE(1025);
    assert.throws(() => frames.feed(header), FrameTooLarge);
    const ok = new FrameBuffer(1024);
    const frame = Buffer.from(encodeFrame({ op: "Done", id: 7 }));
    // split anywhere, the frame comes out once, whole
    assert.deepStrictEqual(ok.feed(frame.subarray(0, 3)), []);
    const [body] = ok.feed(frame.subarray(3));
    assert.deepStrictEqual(Buffer.from(body), frame.subarray(4));
    assert.equal(ok.pending, 0);
    // a big frame in many small reads, then two frames in one read
    const big = Buffer.from(encodeFrame({ op: "Done", id: 8, pad: "z".repeat(100_000) }));
    const many = new FrameBuffer();
    const out = [];
    for (let i = 0; i < big.length; i += 1000) out.push(...many.feed(big.subarray(i, i + 1000)));
    assert.equal(out.length, 1);
    assert.deepStrictEqual(Buffer.from(out[0]), big.subarray(4));
    assert.equal(many.feed(Buffer.concat([frame, frame])).length, 2);
    assert.equal(many.pending, 0);
  });
});

describe("the wire client against a real daemon", { timeout: 60_000 }, () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await new Daemon().start();
    client = new Client({ socket: daemon.socket, root: daemon.root, timeout: 10_000 });
  });
  after(async () => {
    await client?.close();
    await daemon?.dispose();
  });

  it("shakes hands", async () => {
    const w = await client.connect();
    assert.equal(w.op, "Welcome");
    assert.equal(w.protocol_version, 1);
    assert.equal(fs.realpathSync(w.root!), fs.realpathSync(daemon.root));
    assert.ok(client.maxFrameBytes > 0);
  });

  it("appends at each durability; the bytes land unchanged, a uuid once", async () => {
    const sid = randomUUID();
    const batch = [user("hi"), JSON.stringify({ type: "assistant", uuid: randomUUID(), message: { role: "assistant", content: "yo" } })];
    assert.equal((await client.append(sid, CWD, batch, { durability: "written" })).accepted, 2);
    assert.equal((await client.append(sid, CWD, batch, { durability: "durable" })).duplicates, 2);
    const third = { type: "custom-title", customTitle: "t", sessionId: sid };
    assert.equal((await client.append(sid, CWD, [third], { durability: "queued" })).accepted, 1);
    await client.flush(sid);
    assert.deepStrictEqual(lines(fileOf(daemon, sid)), [...batch, JSON.stringify(third)]);
  });

  it("pipelines: many requests in flight, each answer to its own caller", async () => {
    const sid = randomUUID();
    const sent = Array.from({ length: 300 }, (_, i) => user(`message ${i}`));
    const answers = await Promise.all([
      ...sent.map((line) => client.append(sid, CWD, [line])),
      client.status(),
      client.flush(),
    ]);
    for (let i = 0; i < sent.length; i++) assert.equal((answers[i] as { accepted: number }).accepted, 1);
    assert.equal((answers[sent.length] as { op: string }).op, "StatusResult");
    await client.flush(sid);
    assert.deepStrictEqual(lines(fileOf(daemon, sid)), sent); // in call order
  });

  it("turns an Error frame into its typed error, and the connection goes on", async () => {
    await assert.rejects(client.append("not-a-session-id", CWD, [user("x")]), (err: unknown) => {
      assert.ok(err instanceof BadRequest);
      assert.equal((err as BadRequest).code, "bad_request");
      return true;
    });
    await assert.rejects(client.append(randomUUID(), CWD, ["not json"]), BadRequest);
    await assert.rejects(client.restore(randomUUID()), NotFound);
    assert.equal((await client.status()).op, "StatusResult");
  });

  it("lists, searches and records", async () => {
    const sid = randomUUID();
    const first = await client.record(sid, CWD, [user("the zanzibar question")], { durability: "written" });
    assert.ok(first.last);
    const second = await client.record(sid, CWD, [JSON.stringify({ type: "assistant", uuid: randomUUID(), message: { role: "assistant", content: "yes" } })],
      { durability: "written", parent: first.last! });
    const [, answer] = lines(fileOf(daemon, sid)).map((l) => JSON.parse(l));
    assert.equal(answer.parentUuid, first.last);
    assert.ok(second.last);
    const listed = await client.list({ dirs: [path.join(daemon.root, "projects", PROJECT)] });
    assert.ok(listed.sessions.some((s) => s.sessionId === sid));
    const found = await client.search("zanzibar", { all: true });
    assert.deepStrictEqual(found.hits.map((h) => h.sessionId), [sid]);
  });

  it("streams a session's new lines to a subscriber", async () => {
    const sid = randomUUID();
    await client.append(sid, CWD, [user("before")], { durability: "written" });
    const sub = await client.subscribe(sid, { cwd: CWD });
    assert.equal(sub.session, sid);
    const line = user("while watched");
    await client.append(sid, CWD, [line], { durability: "written" });
    const it = sub[Symbol.asyncIterator]();
    const { value } = (await it.next()) as { value: Entries };
    assert.equal(value.file, `${sid}.jsonl`);
    assert.deepStrictEqual(value.lines.map((l) => Buffer.from(l).toString("utf-8")), [line]);
    assert.equal(value.offset, sub.offset);
    await sub.close();
    assert.equal((await it.next()).done, true);
  });

  it("refuses a daemon serving another root, sending it nothing", async () => {
    const other = new Client({ socket: daemon.socket, root: path.join(daemon.base, "elsewhere") });
    await assert.rejects(other.connect(), WrongRoot);
  });

  it("fails a request the daemon does not answer in time (frozen daemon)", async () => {
    const impatient = new Client({ socket: daemon.socket, timeout: 300 });
    await impatient.connect();
    daemon.signal("SIGSTOP");
    try {
      await assert.rejects(impatient.status(), DaemonTimeout);
      await assert.rejects(impatient.subscribe(randomUUID(), { cwd: CWD }), DaemonTimeout);
    } finally {
      daemon.signal("SIGCONT");
      await impatient.close();
    }
  });

  it("refuses to dial a socket that is not there", async () => {
    const none = new Client({ socket: path.join(daemon.base, "run", "none.sock"), timeout: 1000 });
    await assert.rejects(none.connect(), DaemonUnavailable);
  });
});

describe("the frame cap", { timeout: 60_000 }, () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await new Daemon("max_frame_bytes = 65536\n").start();
    client = new Client({ socket: daemon.socket });
  });
  after(async () => {
    await client?.close();
    await daemon?.dispose();
  });

  it("splits a batch over the daemon's cap and refuses an entry no frame holds", async () => {
    const w = await client.connect();
    assert.equal(w.max_frame_bytes, 65536);
    const sid = randomUUID();
    const big = Array.from({ length: 40 }, (_, i) => user(`${i} ${"x".repeat(8000)}`));
    const r = await client.append(sid, CWD, big, { durability: "written" });
    assert.equal(r.accepted, 40);
    assert.deepStrictEqual(lines(fileOf(daemon, sid)), big);
    await assert.rejects(client.append(sid, CWD, [user("y".repeat(70_000))]), EntryTooLarge);
    assert.equal((await client.status()).op, "StatusResult"); // nothing was sent: the connection lives
  });
});

describe("a daemon restart", { timeout: 60_000 }, () => {
  let daemon: Daemon;
  before(async () => {
    daemon = await new Daemon().start();
  });
  after(async () => {
    await daemon?.dispose();
  });

  it("writes every acknowledged or owed entry exactly once after a SIGKILL and a restart", async () => {
    const client = new Client({ socket: daemon.socket, reconnectTimeout: 20_000 });
    try {
      const sid = randomUUID();
      const written = [user("written before")];
      await client.append(sid, CWD, written, { durability: "written" });
      // Acknowledged `queued` only: kept for a resend (the daemon may or may not have written them).
      const queued = [user("queued 1"), JSON.stringify({ type: "custom-title", customTitle: "no uuid", sessionId: sid })];
      await client.append(sid, CWD, queued, { durability: "queued" });
      assert.equal(client.inFlight.unconfirmed, 1);
      // Frozen, the daemon reads nothing: these are owed when it is killed.
      daemon.signal("SIGSTOP");
      const owed = Array.from({ length: 20 }, (_, i) => user(`owed ${i}`));
      const answers = Promise.all(owed.map((line) => client.append(sid, CWD, [line], { durability: "written" })));
      const listed = client.list({ all: true });
      await new Promise((r) => setTimeout(r, 100));
      await daemon.kill();
      await daemon.start();
      const got = await answers; // answered by the new daemon, after the resend
      assert.equal((await listed).op, "Listed"); // a read in flight is made again
      assert.equal(got.reduce((n, a) => n + a.accepted + (a.duplicates ?? 0), 0), owed.length);
      await client.flush(sid);
      assert.deepStrictEqual(lines(fileOf(daemon, sid)), [...written, ...queued, ...owed]);
      assert.equal(client.inFlight.unconfirmed, 0);
    } finally {
      await client.close();
    }
  });

  it("waits for a restarting daemon rather than failing a call made while it is down", async () => {
    const client = new Client({ socket: daemon.socket, reconnectTimeout: 20_000 });
    try {
      await client.connect();
      await daemon.kill();
      const sid = randomUUID();
      const line = user("sent while no daemon runs");
      const answer = client.append(sid, CWD, [line], { durability: "written" });
      const status = client.status();
      await new Promise((r) => setTimeout(r, 300));
      await daemon.start();
      assert.equal((await answer).accepted, 1);
      assert.equal((await status).op, "StatusResult");
      assert.deepStrictEqual(lines(fileOf(daemon, sid)), [line]);
    } finally {
      await client.close();
    }
  });
});
