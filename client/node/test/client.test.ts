import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";

import { Client } from "../src/index.js";
import { Daemon } from "./daemon.js";

describe("the wire client against a real daemon", () => {
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
  });

  it("appends, flushes and the bytes land unchanged", async () => {
    const sid = randomUUID();
    const cwd = "/tmp/proj-a";
    const lines = [
      `{"type":"user","uuid":"${randomUUID()}","message":{"role":"user","content":"hi"},"sessionId":"${sid}"}`,
      `{"type":"assistant","uuid":"${randomUUID()}","message":{"role":"assistant","content":"yo"}}`,
    ];
    const r = await client.append(sid, cwd, lines, { durability: "written" });
    assert.equal(r.accepted, 2);
    const again = await client.append(sid, cwd, lines, { durability: "durable" });
    assert.equal(again.duplicates, 2);
    await client.flush(sid);
    const file = path.join(daemon.root, "projects", "-tmp-proj-a", `${sid}.jsonl`);
    assert.equal(fs.readFileSync(file, "utf-8"), lines.join("\n") + "\n");
  });
});
