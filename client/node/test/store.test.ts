import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import * as path from "node:path";
import { after, describe, it } from "node:test";

import type { SessionStore } from "@anthropic-ai/claude-agent-sdk";

import { SessiondSessionStore, storeFileId, storeSessionId, type SessionKey, type SessionStoreEntry } from "../src/index.js";
import { runSessionStoreConformance } from "./conformance.js";
import { Daemon, PACKAGE_DIR, PYTHON } from "./daemon.js";

describe("SessiondSessionStore", { timeout: 60_000 }, () => {
  const daemons: Daemon[] = [];
  const stores: SessiondSessionStore[] = [];
  after(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await Promise.all(daemons.map((d) => d.dispose()));
  });

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
    const d = await new Daemon().start();
    daemons.push(d);
    const store = new SessiondSessionStore({ socket: d.socket, root: d.root, reconnectTimeout: 20_000 });
    stores.push(store);
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
