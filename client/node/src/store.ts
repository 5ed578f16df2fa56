/**
 * `SessiondSessionStore`: the TypeScript Agent SDK's `SessionStore` on sessiond.
 *
 *     import { query } from "@anthropic-ai/claude-agent-sdk";
 *     import { SessiondSessionStore } from "sessiond";
 *     for await (const m of query({ prompt, options: { sessionStore: new SessiondSessionStore() } })) ...
 *
 * The key maps onto the store exactly as the Python adapter's does
 * (client/agentsdk.py), so both languages read and write the same files:
 *
 * - `projectKey` is the project dir's name under `projects/` (the SDK's default
 *   key is Claude Code's sanitized cwd: the very dir Claude Code writes).
 * - `sessionId` is the transcript `<sessionId>.jsonl`. A UUID is its file name
 *   as it is; any other id (1 to 15 characters of `[A-Za-z0-9_-]`) is packed,
 *   with a hash of its project, into a version-8 UUID (`storeFileId`), which
 *   the listings unpack (`storeSessionId`).
 * - `subpath` `subagents/[workflows/<run>/]agent-<id>` is that agent file.
 *
 * Entries travel as JSON lines in `Append.exact` batches: written at once (never
 * held for a first message), byte for byte, nothing added by the daemon; entries
 * with a `uuid` are deduplicated (a retried batch is written once), others are
 * written as often as they are appended, but for a retry of a batch whose
 * append failed with an unknown outcome (the daemon stalled or went away after
 * it was sent: `DaemonUnavailable.maybeWritten`): that retry goes as a
 * `resend`, which the daemon does not write twice.
 * `delete` moves the session (or one agent file) into the trash. Summaries come
 * from the daemon's catalog, which follows every write, never from a read of the
 * transcript per listing.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs/promises";
import * as path from "node:path";

import { Client, defaultRoot, type ClientOptions } from "./client.js";
import { DaemonTimeout, DaemonUnavailable, NotFound } from "./errors.js";
import type { Durability, Listed, SessionInfo } from "./messages.js";

/** The SDK's key types (structurally the same as `@anthropic-ai/claude-agent-sdk`'s). */
export interface SessionKey {
  projectKey: string;
  sessionId: string;
  subpath?: string;
}

export interface SessionStoreEntry {
  type: string;
  uuid?: string;
  timestamp?: string;
  [k: string]: unknown;
}

export interface SessionSummaryEntry {
  sessionId: string;
  mtime: number;
  data: Record<string, unknown>;
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
const UUID_RE = /^\{?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\}?$/;
const SHORT_ID = /^[A-Za-z0-9_-]{1,15}$/;
const PROJECT = /^[A-Za-z0-9_-]{1,255}$/;
const SUBPATH = /^subagents\/(?:workflows\/([A-Za-z0-9_-]{1,128})\/)?agent-([A-Za-z0-9_-]{1,128})$/;
const TAG = 0b1010n;

/** How long the SDK waits for one `append` (its TranscriptMirrorBatcher's
 * `sendTimeoutMs`) before it gives the batch up without retrying it. The
 * store's requests wait longer by default (`DEFAULT_TIMEOUT_MS`): an append
 * failed by the store before the SDK's own deadline is retried by the SDK
 * (3 tries), while the first may still land once the daemon answers again. */
export const SDK_APPEND_TIMEOUT_MS = 60_000;
export const DEFAULT_TIMEOUT_MS = SDK_APPEND_TIMEOUT_MS + 5_000;
/** Appends of unknown outcome remembered (as digests of their lines) to send
 * their retries as resends: per file, and files. */
const UNCERTAIN_PER_FILE = 8;
const UNCERTAIN_FILES = 256;

function lineDigest(line: string): string {
  return createHash("sha256").update(line, "utf-8").digest("base64");
}

/** Whether `first` is where `lines` begins. */
function startsWith(lines: string[], first: string[]): boolean {
  return first.length <= lines.length && first.every((d, i) => d === lines[i]);
}

function projectHash(projectKey: string): bigint {
  const d = createHash("sha256").update(projectKey, "utf-8").digest();
  return BigInt((d[0] << 16) | (d[1] << 8) | d[2]);
}

function uuidText(value: bigint): string {
  const hex = value.toString(16).padStart(32, "0");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The daemon's session (and file name) for an SDK session id: the id itself
 * when it is a UUID (lower-cased, as the daemon keys it); else the id and a
 * 24-bit hash of its project packed into a version-8 UUID (the daemon's
 * sessions are UUIDs, one project dir each). Throws for any other id. */
export function storeFileId(projectKey: string, sessionId: string): string {
  const uuid = UUID_RE.exec(sessionId);
  if (uuid) return uuid[1].toLowerCase();
  if (!SHORT_ID.test(sessionId)) {
    throw new TypeError(`sessiond stores a session id that is a UUID or 1 to 15 characters of [A-Za-z0-9_-], not ${JSON.stringify(sessionId.slice(0, 80))}`);
  }
  let chars = 0n;
  for (const c of sessionId.padEnd(15, "A")) chars = (chars << 6n) | BigInt(ALPHABET.indexOf(c));
  const payload = (BigInt(sessionId.length - 1) << 118n) | (chars << 28n) | (projectHash(projectKey) << 4n) | TAG;
  const a = payload >> 74n;
  const b = (payload >> 62n) & 0xfffn;
  const c = payload & ((1n << 62n) - 1n);
  return uuidText((a << 80n) | (8n << 76n) | (b << 64n) | (0b10n << 62n) | c);
}

/** The SDK session id of a file of `projectKey` (`storeFileId`'s inverse). */
export function storeSessionId(projectKey: string, fileId: string): string {
  const value = BigInt("0x" + fileId.replace(/-/g, ""));
  if (((value >> 76n) & 0xfn) !== 8n || ((value >> 62n) & 0b11n) !== 0b10n) return fileId;
  const payload = ((value >> 80n) << 74n) | (((value >> 64n) & 0xfffn) << 62n) | (value & ((1n << 62n) - 1n));
  if ((payload & 0xfn) !== TAG || ((payload >> 4n) & 0xffffffn) !== projectHash(projectKey)) return fileId;
  const length = Number(payload >> 118n) + 1;
  const chars = (payload >> 28n) & ((1n << 90n) - 1n);
  let text = "";
  for (let i = 0; i < 15; i++) text += ALPHABET[Number((chars >> BigInt(6 * (14 - i))) & 63n)];
  return text.slice(0, length);
}

/** [agent, run] of a key's subpath; [undefined, undefined] for the main transcript. */
function route(subpath: string | undefined): [string | undefined, string | undefined] {
  if (subpath === undefined) return [undefined, undefined];
  const found = SUBPATH.exec(subpath);
  if (!found) throw new TypeError(`sessiond stores subpaths subagents/[workflows/<run>/]agent-<id>, not ${JSON.stringify(subpath.slice(0, 200))}`);
  return [found[2], found[1]];
}

function checkProject(projectKey: string): void {
  if (!PROJECT.test(projectKey)) {
    throw new TypeError(`a project key is a project dir's name ([A-Za-z0-9_-]{1,255}), not ${JSON.stringify(projectKey.slice(0, 200))}`);
  }
}

function epochMs(iso: string | null | undefined): number | undefined {
  if (!iso) return undefined;
  const ms = Date.parse(iso);
  return Number.isFinite(ms) ? Math.floor(ms) : undefined;
}

/** The SDK's summary state (`foldSessionSummary`'s keys) from the daemon's
 * listing record of the session. */
function summaryData(info: SessionInfo): Record<string, unknown> {
  const data: Record<string, unknown> = { isSidechain: false };
  const created = epochMs(info.createdAt);
  if (created !== undefined) data.createdAt = created;
  if (info.cwd) data.cwd = info.cwd;
  if (info.firstPrompt) {
    data.firstPrompt = info.firstPrompt;
    data.firstPromptLocked = true;
  }
  const fields: [string, string | null][] = [
    ["customTitle", info.customTitle], ["aiTitle", info.aiTitle], ["lastPrompt", info.lastPrompt],
    ["summaryHint", info.summary], ["gitBranch", info.gitBranch], ["tag", info.tag],
  ];
  for (const [key, value] of fields) if (value) data[key] = value;
  return data;
}

async function readOrEmpty(file: string): Promise<Buffer> {
  try {
    const st = await fs.lstat(file);
    if (!st.isFile()) return Buffer.alloc(0); // a FIFO, a link, a dir: never opened
    return await fs.readFile(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" || (err as NodeJS.ErrnoException).code === "ENOTDIR") return Buffer.alloc(0);
    throw err;
  }
}

async function agentFiles(dir: string, prefix: string): Promise<string[]> {
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch {
    return [];
  }
  return names.filter((n) => n.startsWith("agent-") && n.endsWith(".jsonl")).sort().map((n) => prefix + n.slice(0, -6));
}

export interface SessiondSessionStoreOptions extends ClientOptions {
  /** Milliseconds a connect, or a request's answer, may take (default
   * `DEFAULT_TIMEOUT_MS`, 65 s: longer than the SDK's own 60 s for an append). */
  timeout?: number;
  /** When an append returns (default `written`: the SDK's own copy is already on disk). */
  durability?: Durability;
  /** A client to share (default: one of its own, from the other options). */
  client?: Client;
}

/**
 * The Agent SDK's `SessionStore` (every method, required and optional) on the
 * daemon at `socket` serving `root` (defaults: the user's daemon). One
 * pipelined connection serves every call; after a daemon restart it reconnects
 * and resends what was not known written.
 */
export class SessiondSessionStore {
  readonly client: Client;
  readonly durability: Durability;
  private readonly root: string | undefined;
  /** Per file (`fid/agent/run`): the line digests of appends that failed after
   * they were sent (the daemon may have written them). An append that begins
   * with one of them is its retry: sent with `resend`. */
  private readonly uncertain = new Map<string, string[][]>();

  constructor(options: SessiondSessionStoreOptions = {}) {
    this.client = options.client ?? new Client({ name: "sessiond-agentsdk-node", ...options, timeout: options.timeout ?? DEFAULT_TIMEOUT_MS });
    this.durability = options.durability ?? "written";
    this.root = options.root;
  }

  /** Close the store's connection. */
  close(): Promise<void> {
    return this.client.close();
  }

  private async projects(): Promise<string> {
    const welcome = await this.client.ready(); // a restarting daemon is waited for, as by every other call
    return path.join(welcome.root || this.root || defaultRoot(), "projects");
  }

  /** Mirror a batch: the entries in call order, each one JSON line of the key's
   * file; a uuid already in the file is not written again. */
  async append(key: SessionKey, entries: SessionStoreEntry[]): Promise<void> {
    if (entries.length === 0) return;
    checkProject(key.projectKey);
    const fid = storeFileId(key.projectKey, key.sessionId);
    const [agent, run] = route(key.subpath);
    const lines = entries.map((e) => JSON.stringify(e));
    const file = `${fid}/${agent ?? ""}/${run ?? ""}`;
    const earlier = this.uncertain.get(file);
    const digests = earlier ? lines.map(lineDigest) : [];
    const resend = earlier !== undefined && earlier.some((d) => startsWith(digests, d));
    try {
      await this.client.append(fid, "/", lines, { durability: this.durability, agent, run, exact: true, project: key.projectKey, resend: resend || undefined });
    } catch (err) {
      if (err instanceof DaemonUnavailable && err.maybeWritten) this.remember(file, digests.length ? digests : lines.map(lineDigest));
      throw err;
    }
    if (resend) this.forget(file, digests);
  }

  /** An append to `file` failed after it was sent: its retry is a resend. */
  private remember(file: string, digests: string[]): void {
    const batches = this.uncertain.get(file) ?? [];
    this.uncertain.delete(file); // re-inserted last: the map's order is the files' last failure
    batches.push(digests);
    if (batches.length > UNCERTAIN_PER_FILE) batches.shift();
    this.uncertain.set(file, batches);
    if (this.uncertain.size > UNCERTAIN_FILES) this.uncertain.delete(this.uncertain.keys().next().value!);
  }

  /** A resend that begins with `digests` succeeded: what it retried is written. */
  private forget(file: string, digests: string[]): void {
    const batches = (this.uncertain.get(file) ?? []).filter((d) => !startsWith(digests, d));
    if (batches.length) this.uncertain.set(file, batches);
    else this.uncertain.delete(file);
  }

  /** Every entry of the key's file, in order; null when it has none. */
  async load(key: SessionKey): Promise<SessionStoreEntry[] | null> {
    let fid: string;
    let agent: string | undefined;
    let run: string | undefined;
    try {
      checkProject(key.projectKey);
      fid = storeFileId(key.projectKey, key.sessionId);
      [agent, run] = route(key.subpath);
    } catch {
      return null; // a key append refuses was never written
    }
    await this.client.flush(fid); // whatever another client had queued for it is in the file
    const base = path.join(await this.projects(), key.projectKey);
    let file = path.join(base, `${fid}.jsonl`);
    if (agent !== undefined) file = path.join(base, fid, "subagents", ...(run ? ["workflows", run] : []), `agent-${agent}.jsonl`);
    const data = await readOrEmpty(file);
    if (data.length === 0) return null;
    const out: SessionStoreEntry[] = [];
    for (const line of data.toString("utf-8").split("\n")) if (line.trim()) out.push(JSON.parse(line) as SessionStoreEntry);
    return out;
  }

  /** The project's sessions with their mtime (epoch ms), subagents aside. */
  async listSessions(projectKey: string): Promise<{ sessionId: string; mtime: number }[]> {
    return (await this.listSessionSummaries(projectKey)).map(({ sessionId, mtime }) => ({ sessionId, mtime }));
  }

  /** Every session of the project with its summary, from the daemon's catalog
   * (one List, kept up to date by the daemon as files are written). */
  async listSessionSummaries(projectKey: string): Promise<SessionSummaryEntry[]> {
    checkProject(projectKey);
    const dir = path.join(await this.projects(), projectKey);
    try {
      if (!(await fs.stat(dir)).isDirectory()) return [];
    } catch {
      return [];
    }
    const listed = await this.client.call<Listed>({ op: "List", dirs: [dir], every: true });
    const out: SessionSummaryEntry[] = [];
    for (const info of listed.sessions) {
      const mtime = epochMs(info.modifiedAt);
      if (mtime === undefined) continue;
      out.push({ sessionId: storeSessionId(projectKey, info.sessionId), mtime, data: summaryData(info) });
    }
    return out;
  }

  /** Move the session (main transcript and every agent file), or the one
   * agent file a subpath names, into the trash; nothing is unlinked. */
  async delete(key: SessionKey): Promise<void> {
    checkProject(key.projectKey);
    const fid = storeFileId(key.projectKey, key.sessionId);
    const [agent, run] = route(key.subpath);
    const main = path.join(await this.projects(), key.projectKey, `${fid}.jsonl`);
    const trash = () => this.client.call({ op: "Trash", session: fid, path: main, force: true, agent, run });
    try {
      await trash().catch((err) => {
        // lost in flight: once more (the daemon may have trashed it: then not_found)
        if (err instanceof DaemonUnavailable && !(err instanceof DaemonTimeout)) return trash();
        throw err;
      });
    } catch (err) {
      if (!(err instanceof NotFound)) throw err; // never written, or already deleted
    }
  }

  /** The subpaths of the session's agent files. */
  async listSubkeys(key: { projectKey: string; sessionId: string }): Promise<string[]> {
    checkProject(key.projectKey);
    const fid = storeFileId(key.projectKey, key.sessionId);
    await this.client.flush(fid);
    const sub = path.join(await this.projects(), key.projectKey, fid, "subagents");
    const out = await agentFiles(sub, "subagents/");
    let runs: string[] = [];
    try {
      runs = (await fs.readdir(path.join(sub, "workflows"), { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name).sort();
    } catch {
      // no workflow runs
    }
    for (const run of runs) out.push(...(await agentFiles(path.join(sub, "workflows", run), `subagents/workflows/${run}/`)));
    return out;
  }
}
