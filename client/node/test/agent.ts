/**
 * One agent process on the TypeScript Agent SDK with `SessiondSessionStore`
 * as its session store, for the end-to-end tests that Python drives
 * (tests/node/test_node_e2e.py): it runs the real Claude Code against whatever
 * Messages API the environment names (the tests' fake one), in `cwd`, with the
 * daemon at $SESSIOND_SOCKET serving $SESSIOND_ROOT.
 *
 *     node dist/test/agent.js '<spec as JSON>'
 *
 * The spec: `{ cwd, claude, steps }`, `claude` the Claude Code executable
 * (the one the Python SDK's wheel bundles: `npm ci --omit=optional` leaves the
 * npm SDK's own out), `steps` done in order, each answered by one JSON line
 * on stdout as soon as it is done:
 * - `{ op: "query", prompt, resume?, continue?, tools? }`: one query to its end,
 *   `{ op, sessionId, result }`;
 * - `{ op: "fork", sessionId, title? }`: `{ op, sessionId }` of the fork;
 * - `{ op: "rename", sessionId, title }`, `{ op: "tag", sessionId, tag }`,
 *   `{ op: "delete", sessionId }`: `{ op }`;
 * - `{ op: "list" }`: `{ op, sessions }`, the SDK's `listSessions` of `cwd`.
 * A failure is `{ error }` on stdout and exit status 1. Not a test file of its
 * own (Node's runner does not pick it up): the checks are the Python test's.
 */
import {
  deleteSession,
  forkSession,
  listSessions,
  query,
  renameSession,
  tagSession,
  type SDKMessage,
} from "@anthropic-ai/claude-agent-sdk";

import { SessiondSessionStore } from "../src/index.js";

type Step =
  | { op: "query"; prompt: string; resume?: string; continue?: boolean; tools?: string[] }
  | { op: "fork"; sessionId: string; title?: string }
  | { op: "rename"; sessionId: string; title: string }
  | { op: "tag"; sessionId: string; tag: string }
  | { op: "delete"; sessionId: string }
  | { op: "list" };

interface Spec {
  cwd: string;
  claude: string;
  steps: Step[];
}

function say(line: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(line) + "\n");
}

async function run(spec: Spec, store: SessiondSessionStore, step: Step): Promise<Record<string, unknown>> {
  const where = { dir: spec.cwd, sessionStore: store };
  switch (step.op) {
    case "query": {
      const messages: SDKMessage[] = [];
      for await (const message of query({
        prompt: step.prompt,
        options: {
          cwd: spec.cwd,
          pathToClaudeCodeExecutable: spec.claude,
          sessionStore: store,
          sessionStoreFlush: "eager",
          // allowedTools, not bypassPermissions: Claude Code refuses bypass mode as root
          allowedTools: step.tools ?? ["Bash", "Read"],
          maxTurns: 4,
          resume: step.resume,
          continue: step.continue,
        },
      })) messages.push(message);
      const result = messages.find((m) => m.type === "result");
      if (!result || result.type !== "result") throw new Error("the query ended without a result");
      if (result.subtype !== "success") throw new Error(`the query failed: ${result.subtype}`);
      return { op: step.op, sessionId: result.session_id, result: result.result };
    }
    case "fork":
      return { op: step.op, sessionId: (await forkSession(step.sessionId, { ...where, title: step.title })).sessionId };
    case "rename":
      await renameSession(step.sessionId, step.title, where);
      return { op: step.op };
    case "tag":
      await tagSession(step.sessionId, step.tag, where);
      return { op: step.op };
    case "delete":
      await deleteSession(step.sessionId, where);
      return { op: step.op };
    case "list":
      return { op: step.op, sessions: await listSessions(where) };
  }
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? "") as Spec;
  const store = new SessiondSessionStore({ reconnectTimeout: 30_000 });
  try {
    for (const step of spec.steps) say(await run(spec, store, step));
  } finally {
    await store.close();
  }
}

main().catch((err: unknown) => {
  say({ error: err instanceof Error ? err.stack ?? err.message : String(err) });
  process.exitCode = 1;
});
