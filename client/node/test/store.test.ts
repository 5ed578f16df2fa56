import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import * as path from "node:path";
import { after, describe, it } from "node:test";

import type { SessionStore } from "@anthropic-ai/claude-agent-sdk";

import {
  DaemonTimeout,
  DaemonUnavailable,
  SDK_APPEND_TIMEOUT_MS,
  SessiondSessionStore,
  storeFileId,
  storeSessionId,
  type SessionKey,
  type SessionStoreEntry,
} from "../src/index.js";
import { runSessionStoreConformance } from "./conformance.js";
import { Daemon, PACKAGE_DIR, PYTHON } from "./daemon.js";

describe("SessiondSessionStore", { timeout: 60_000 }, () => {
  const daemons: Daemon[] = [];
  const stores: SessiondSessionStore[] = [];
  after(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await Promise.all(daemons.map((d) => d.dispose()));
  });

  /** A daemon of its own and a store on it (`timeout` as given, else the store's
   * default), both disposed after the suite. */
  async function storeOnDaemon(timeout?: number): Promise<{ d: Daemon; store: SessiondSessionStore }> {
    const d = await new Daemon().start();
    daemons.push(d);
    const store = new SessiondSessionStore({ socket: d.socket, root: d.root, reconnectTimeout: 20_000, ...(timeout === undefined ? {} : { timeout }) });
    stores.push(store);
    return { d, store };
  }

  it("passes the SDK's 14 SessionStore contracts, a fresh daemon for each", async () => {
    // The next contract's daemon starts while this one runs.
    const next = () => {
      const d = new Daemon();
      daemons.push(d);
      return d.start();
    };
    let starting = next();
    const ran = await runSessionStoreConformance(async () => {
      const d = await starting;
      starting = next();
      const store: SessionStore = new SessiondSessionStore({ socket: d.socket, root: d.root });
      stores.push(store as SessiondSessionStore);
      return store;
    });
    await starting; // the one started for a 15th, disposed with the others
    assert.equal(ran, 14);
  });

  it("keeps every entry exactly once, in call order, across a SIGKILL and restart of the daemon", async () => {
    const { d, store } = await storeOnDaemon();
    const project = "-work-agents";
    const keys = [0, 1, 2].map((i): SessionKey => ({ projectKey: project, sessionId: randomUUID() }));
    keys.push({ ...keys[0], subpath: "subagents/agent-a1" });
    const sent = new Map<SessionKey, SessionStoreEntry[]>(keys.map((k) => [k, []]));
    let batches = 0;
    // Each key's batches in order, as the SDK sends them (the next after the last
    // resolved); the keys at once, on the store's one connection.
    const producers = keys.map(async (key, k) => {
      for (let b = 0; b < 40; b++) {
        const batch: SessionStoreEntry[] = [
          { type: "user", uuid: randomUUID(), message: { role: "user", content: `${k}.${b}` } },
          { type: "x-mode", n: b, key: k }, // no uuid: never deduplicated, never doubled by a resend
        ];
        sent.get(key)!.push(...batch);
        await store.append(key, batch);
        batches++;
      }
    });
    while (batches < 30) await new Promise((r) => setTimeout(r, 5));
    await d.kill();
    await d.start();
    await Promise.all(producers);
    for (const key of keys) assert.deepStrictEqual(await store.load(key), sent.get(key));
  });

  it("writes a batch once when the SDK retries it after the daemon stalled (SIGSTOP), entries without a uuid too", async () => {
    // The SDK's TranscriptMirrorBatcher: up to 3 tries of the same batch, 200 and 800 ms apart,
    // a try failed by the store's own error (here its DaemonTimeout: a small `timeout`).
    const { d, store } = await storeOnDaemon(400);
    const key: SessionKey = { projectKey: "-work-stall", sessionId: randomUUID() };
    const first: SessionStoreEntry[] = [{ type: "user", uuid: randomUUID(), message: { role: "user", content: "hi" } }];
    await store.append(key, first);
    const batch: SessionStoreEntry[] = [
      { type: "x-mode", mode: "plan" }, // no uuid, first in the batch
      { type: "assistant", uuid: randomUUID(), message: { role: "assistant", content: "ok" } },
      { type: "x-progress", n: 1 }, // no uuid, after one with
    ];
    const other: SessionKey = { ...key, subpath: "subagents/agent-s1" };
    d.signal("SIGSTOP");
    let failures = 0;
    try {
      for (const backoff of [200, 800, undefined]) {
        try {
          await store.append(key, batch);
          break;
        } catch (err) {
          assert.ok(err instanceof DaemonTimeout && err.maybeWritten, String(err));
          failures++;
          if (failures === 2) d.signal("SIGCONT"); // the third try finds the daemon back
          if (backoff === undefined) throw err;
          await new Promise((r) => setTimeout(r, backoff));
        }
      }
    } finally {
      d.signal("SIGCONT");
    }
    assert.equal(failures, 2);
    // The same entries appended anew (not a retry: nothing failed) are written again; another file is not a retry.
    await store.append(other, batch);
    assert.deepStrictEqual(await store.load(key), [...first, ...batch]);
    assert.deepStrictEqual(await store.load(other), batch);
    await store.append(key, [batch[0]]);
    assert.deepStrictEqual(await store.load(key), [...first, ...batch, batch[0]]);
  });

  it("writes a batch once when every try of it fails while the daemon is stopped", async () => {
    const { d, store } = await storeOnDaemon(300);
    const key: SessionKey = { projectKey: "-work-stall", sessionId: randomUUID() };
    const batch: SessionStoreEntry[] = [{ type: "user", uuid: randomUUID(), message: { role: "user", content: "a" } }, { type: "x-mode", n: 0 }];
    await store.append(key, batch.slice(0, 1));
    d.signal("SIGSTOP");
    try {
      for (let i = 0; i < 3; i++) await assert.rejects(store.append(key, batch.slice(1)), DaemonUnavailable);
    } finally {
      d.signal("SIGCONT");
    }
    assert.deepStrictEqual(await store.load(key), batch);
  });

  it("waits for a restarting daemon in every call: listSessions, listSessionSummaries, delete as append and load", async () => {
    const { d, store } = await storeOnDaemon(10_000);
    const kept: SessionKey = { projectKey: "-work-listed", sessionId: randomUUID() };
    const gone: SessionKey = { projectKey: "-work-deleted", sessionId: randomUUID() };
    await store.append(kept, [{ type: "user", uuid: randomUUID(), message: { role: "user", content: "kept" } }]);
    await store.append(gone, [{ type: "user", uuid: randomUUID(), message: { role: "user", content: "gone" } }]);
    await d.stop();
    const calls = Promise.allSettled([
      store.listSessions(kept.projectKey),
      store.listSessionSummaries(kept.projectKey),
      store.delete(gone),
      store.load(kept),
    ]);
    await new Promise((r) => setTimeout(r, 300)); // the calls find no daemon
    await d.start();
    const [sessions, summaries, deleted, loaded] = await calls;
    assert.equal(deleted.status, "fulfilled", String((deleted as PromiseRejectedResult).reason));
    assert.equal(loaded.status, "fulfilled", String((loaded as PromiseRejectedResult).reason));
    assert.equal(sessions.status, "fulfilled", String((sessions as PromiseRejectedResult).reason));
    assert.deepStrictEqual(sessions.value.map((s) => s.sessionId), [kept.sessionId]);
    assert.equal(summaries.status, "fulfilled", String((summaries as PromiseRejectedResult).reason));
    assert.deepStrictEqual(summaries.value.map((s) => s.sessionId), [kept.sessionId]);
    assert.equal(await store.load(gone), null);
  });

  it("waits longer for an append than the SDK does by default", () => {
    const store = new SessiondSessionStore({ socket: "/nonexistent/s.sock" });
    assert.ok(store.client.timeout > SDK_APPEND_TIMEOUT_MS);
    assert.equal(new SessiondSessionStore({ socket: "/nonexistent/s.sock", timeout: 1000 }).client.timeout, 1000);
  });

  it("lets a program that is done exit without closing the store", async () => {
    const d = await new Daemon().start();
    daemons.push(d);
    const script = `
      import { SessiondSessionStore } from ${JSON.stringify(path.join(PACKAGE_DIR, "dist", "src", "index.js"))};
      const store = new SessiondSessionStore();
      await store.append({ projectKey: "p", sessionId: "s" }, [{ type: "x", uuid: "u" }]);
      console.log(JSON.stringify(await store.load({ projectKey: "p", sessionId: "s" })));`;
    const out = spawnSync(process.execPath, ["--input-type=module", "-e", script], { env: d.env, encoding: "utf-8", timeout: 20_000 });
    assert.equal(out.error, undefined); // not killed by the timeout: it exited by itself
    assert.equal(out.status, 0, out.stderr);
    assert.deepStrictEqual(JSON.parse(out.stdout), [{ type: "x", uuid: "u" }]);
  });

  it("names files as the Python adapter does", () => {
    const cases: [string, string][] = [["proj", "sess"], ["proj", "a"], ["-home-u-x", "ABCdef_-0123456"],
      ["p", "3F2504E0-4F89-41D3-9A0C-0305E82C3301"]];
    const script = "import json,sys\nfrom sessiond.client.agentsdk import store_file_id\n" +
      "print(json.dumps([store_file_id(p, s) for p, s in json.loads(sys.argv[1])]))";
    const out = spawnSync(PYTHON, ["-c", script, JSON.stringify(cases)], { encoding: "utf-8", timeout: 30_000 });
    assert.equal(out.status, 0, out.stderr);
    const python = JSON.parse(out.stdout) as string[];
    assert.deepStrictEqual(cases.map(([p, s]) => storeFileId(p, s)), python);
    for (const [p, s] of cases.slice(0, 3)) assert.equal(storeSessionId(p, storeFileId(p, s)), s);
    // A short id's file in another project is another session.
    assert.notEqual(storeSessionId("other", storeFileId("proj", "sess")), "sess");
  });
});
