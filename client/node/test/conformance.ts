/**
 * The 14 SessionStore contracts of the Agent SDK, ported from the Python SDK's
 * `claude_agent_sdk.testing.run_session_store_conformance` (the npm package
 * ships no such suite), contract for contract, with the TypeScript key names.
 * `makeStore` is called once per contract, for isolation. Nothing is skipped:
 * a store lacking an optional method fails here instead.
 */
import assert from "node:assert/strict";

import { foldSessionSummary, type SessionKey, type SessionStore, type SessionStoreEntry } from "@anthropic-ai/claude-agent-sdk";

const KEY: SessionKey = { projectKey: "proj", sessionId: "sess" };

/** A test entry (`type` is required; its value is irrelevant to the contracts). */
function e(d: Record<string, unknown>): SessionStoreEntry {
  return { type: "x", ...d };
}

type Full = Required<SessionStore>;

function full(store: SessionStore): Full {
  for (const method of ["listSessions", "listSessionSummaries", "delete", "listSubkeys"] as const) {
    assert.equal(typeof store[method], "function", `the store implements ${method}`);
  }
  return store as Full;
}

/** Runs every contract; returns how many ran (14). */
export async function runSessionStoreConformance(makeStore: () => Promise<SessionStore>): Promise<number> {
  let ran = 0;
  const fresh = async () => full(await makeStore());

  // 1. append then load returns same entries in same order
  let store = await fresh();
  await store.append(KEY, [e({ uuid: "b", n: 1 }), e({ uuid: "a", n: 2 })]);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: "b", n: 1 }), e({ uuid: "a", n: 2 })]);
  ran++;

  // 2. load unknown key returns null
  store = await fresh();
  assert.equal(await store.load({ projectKey: "proj", sessionId: "nope" }), null);
  await store.append(KEY, [e({ uuid: "x", n: 1 })]);
  assert.equal(await store.load({ ...KEY, subpath: "nope" }), null);
  ran++;

  // 3. multiple append calls preserve call order
  store = await fresh();
  await store.append(KEY, [e({ uuid: "z", n: 1 })]);
  await store.append(KEY, [e({ uuid: "a", n: 2 }), e({ uuid: "m", n: 3 })]);
  await store.append(KEY, [e({ uuid: "b", n: 4 })]);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: "z", n: 1 }), e({ uuid: "a", n: 2 }), e({ uuid: "m", n: 3 }), e({ uuid: "b", n: 4 })]);
  ran++;

  // 4. append([]) is a no-op
  store = await fresh();
  await store.append(KEY, [e({ uuid: "a", n: 1 })]);
  await store.append(KEY, []);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: "a", n: 1 })]);
  ran++;

  // 5. subpath keys are stored independently of main
  store = await fresh();
  const sub: SessionKey = { ...KEY, subpath: "subagents/agent-1" };
  await store.append(KEY, [e({ uuid: "m", n: 1 })]);
  await store.append(sub, [e({ uuid: "s", n: 1 })]);
  assert.deepStrictEqual(await store.load(KEY), [e({ uuid: "m", n: 1 })]);
  assert.deepStrictEqual(await store.load(sub), [e({ uuid: "s", n: 1 })]);
  ran++;

  // 6. projectKey isolation
  store = await fresh();
  await store.append({ projectKey: "A", sessionId: "s1" }, [e({ from: "A" })]);
  await store.append({ projectKey: "B", sessionId: "s1" }, [e({ from: "B" })]);
  assert.deepStrictEqual(await store.load({ projectKey: "A", sessionId: "s1" }), [e({ from: "A" })]);
  assert.deepStrictEqual(await store.load({ projectKey: "B", sessionId: "s1" }), [e({ from: "B" })]);
  assert.equal((await store.listSessions("A")).length, 1);
  assert.equal((await store.listSessions("B")).length, 1);
  ran++;

  // 7. listSessions returns sessionIds for project
  store = await fresh();
  await store.append({ projectKey: "proj", sessionId: "a" }, [e({ n: 1 })]);
  await store.append({ projectKey: "proj", sessionId: "b" }, [e({ n: 1 })]);
  await store.append({ projectKey: "other", sessionId: "c" }, [e({ n: 1 })]);
  let sessions = await store.listSessions("proj");
  assert.deepStrictEqual(sessions.map((s) => s.sessionId).sort(), ["a", "b"]);
  // mtime must be epoch-ms; >1e12 rules out epoch-seconds (about 2001 in ms).
  assert.ok(sessions.every((s) => Number.isFinite(s.mtime) && s.mtime > 1e12));
  assert.deepStrictEqual(await store.listSessions("never-appended-project"), []);
  ran++;

  // 8. listSessions excludes subagent subpaths
  store = await fresh();
  await store.append({ projectKey: "proj", sessionId: "main" }, [e({ n: 1 })]);
  await store.append({ projectKey: "proj", sessionId: "main", subpath: "subagents/agent-1" }, [e({ n: 1 })]);
  sessions = await store.listSessions("proj");
  assert.deepStrictEqual(sessions.map((s) => s.sessionId), ["main"]);
  ran++;

  // 14. listSessionSummaries returns persisted fold output that round-trips
  // through foldSessionSummary again (the store persists `data`, never interprets it).
  store = await fresh();
  const key: SessionKey = { projectKey: "proj", sessionId: "summ-sess" };
  await store.append(key, [
    e({ timestamp: "2024-01-01T00:00:00.000Z", customTitle: "first" }),
    e({ timestamp: "2024-01-01T00:00:01.000Z" }),
  ]);
  await store.append(key, [e({ timestamp: "2024-01-01T00:00:02.000Z", customTitle: "second" })]);
  await store.append({ projectKey: "other", sessionId: "elsewhere" }, [e({ timestamp: "2024-01-01T00:00:00.000Z" })]);
  const summaries = await store.listSessionSummaries("proj");
  const byId = new Map(summaries.map((s) => [s.sessionId, s]));
  assert.deepStrictEqual([...byId.keys()], ["summ-sess"]);
  const summ = byId.get("summ-sess")!;
  assert.ok(Number.isFinite(summ.mtime) && summ.mtime > 1e12);
  // The sidecar's mtime shares a clock with listSessions()'s for the same session.
  const listed = new Map((await store.listSessions("proj")).map((s) => [s.sessionId, s.mtime]));
  assert.ok(summ.mtime >= listed.get("summ-sess")!);
  assert.equal(typeof summ.data, "object");
  assert.ok(summ.data !== null && !Array.isArray(summ.data));
  const refolded = foldSessionSummary(summ, key, [e({ timestamp: "2024-01-01T00:00:03.000Z" })]);
  assert.equal(refolded.sessionId, "summ-sess");
  assert.equal(refolded.mtime, summ.mtime); // the fold keeps prev.mtime: the adapter stamps it
  // Subagent appends must not affect the main session's summary.
  await store.append({ ...key, subpath: "subagents/agent-1" }, [e({ timestamp: "2024-01-01T00:00:09.000Z", customTitle: "subagent" })]);
  const afterSub = new Map((await store.listSessionSummaries("proj")).map((s) => [s.sessionId, s]));
  assert.deepStrictEqual(afterSub.get("summ-sess")!.data, summ.data);
  assert.deepStrictEqual(await store.listSessionSummaries("never-appended-project"), []);
  await store.delete(key);
  assert.deepStrictEqual(await store.listSessionSummaries("proj"), []);
  ran++;

  // 9. delete main then load returns null
  store = await fresh();
  await store.delete({ projectKey: "proj", sessionId: "never-written" });
  await store.append(KEY, [e({ n: 1 })]);
  await store.delete(KEY);
  assert.equal(await store.load(KEY), null);
  ran++;

  // 10. delete main cascades to subkeys
  store = await fresh();
  const sub1: SessionKey = { ...KEY, subpath: "subagents/agent-1" };
  const sub2: SessionKey = { ...KEY, subpath: "subagents/agent-2" };
  const other: SessionKey = { projectKey: "proj", sessionId: "sess2" };
  const otherProj: SessionKey = { projectKey: "other-proj", sessionId: KEY.sessionId };
  for (const k of [KEY, sub1, sub2, other, otherProj]) await store.append(k, [e({ n: 1 })]);
  await store.delete(KEY);
  assert.equal(await store.load(KEY), null);
  assert.equal(await store.load(sub1), null);
  assert.equal(await store.load(sub2), null);
  assert.equal((await store.load(other))?.length, 1);
  assert.equal((await store.load(otherProj))?.length, 1);
  assert.deepStrictEqual(await store.listSubkeys(KEY), []);
  assert.ok(!(await store.listSessions(KEY.projectKey)).some((s) => s.sessionId === KEY.sessionId));
  ran++;

  // 11. delete with subpath removes only that subkey
  store = await fresh();
  await store.append(KEY, [e({ n: 1 })]);
  await store.append(sub1, [e({ n: 1 })]);
  await store.append(sub2, [e({ n: 1 })]);
  await store.delete(sub1);
  assert.equal(await store.load(sub1), null);
  assert.equal((await store.load(sub2))?.length, 1);
  assert.equal((await store.load(KEY))?.length, 1);
  assert.deepStrictEqual(await store.listSubkeys(KEY), ["subagents/agent-2"]);
  ran++;

  // 12. listSubkeys returns subpaths
  store = await fresh();
  await store.append(KEY, [e({ n: 1 })]);
  await store.append({ ...KEY, subpath: "subagents/agent-1" }, [e({ n: 1 })]);
  await store.append({ ...KEY, subpath: "subagents/agent-2" }, [e({ n: 1 })]);
  await store.append({ projectKey: KEY.projectKey, sessionId: "other-sess", subpath: "subagents/agent-x" }, [e({ n: 1 })]);
  const subkeys = await store.listSubkeys(KEY);
  assert.deepStrictEqual([...subkeys].sort(), ["subagents/agent-1", "subagents/agent-2"]);
  assert.ok(!subkeys.includes("subagents/agent-x"));
  ran++;

  // 13. listSubkeys excludes main transcript
  store = await fresh();
  await store.append(KEY, [e({ n: 1 })]);
  assert.deepStrictEqual(await store.listSubkeys(KEY), []);
  assert.deepStrictEqual(await store.listSubkeys({ projectKey: "proj", sessionId: "never-appended" }), []);
  ran++;

  return ran;
}
