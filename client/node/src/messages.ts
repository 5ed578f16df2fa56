/**
 * The messages of sessiond/wire/messages.py that this client sends and reads,
 * as TypeScript types. Requests are built by the Client (it adds `op` and
 * `id`); answers arrive as plain objects with their `op`.
 */
import type { LeaseHolder } from "./errors.js";

/** When an append is acknowledged: accepted into the daemon's queue, written
 * with write(2), or written and fdatasync'ed. */
export type Durability = "queued" | "written" | "durable";
export const DURABILITIES: readonly Durability[] = ["queued", "written", "durable"];

/** Entries: JSON objects (encoded here), or a line's JSON bytes/text as it is. */
export type Entry = Record<string, unknown> | Uint8Array | string;

export interface Welcome {
  op: "Welcome";
  id: number;
  protocol_version: number;
  daemon_version: string;
  pid: number;
  max_frame_bytes?: number;
  root?: string;
}

export interface Appended {
  op: "Appended";
  id: number;
  accepted: number;
  duplicates?: number;
  /** Record only: uuid of the last chain participant, the next call's hint. */
  last?: string | null;
  /** Entries held before the session's first user/assistant message (no file yet). */
  pending?: number;
}

export interface Flushed {
  op: "Flushed";
  id: number;
  files?: number;
}

export interface Done {
  op: "Done";
  id: number;
}

export interface Opened {
  op: "Opened";
  id: number;
  session: string;
  path: string;
  materialized: boolean;
  holder?: LeaseHolder | null;
}

export interface Adopted {
  op: "Adopted";
  id: number;
  session: string;
  path: string;
  reappended?: number;
}

/** One listed session (sessiond/wire/session_info.py). */
export interface SessionInfo {
  sessionId: string;
  path: string;
  title: string | null;
  firstPrompt: string | null;
  lastPrompt: string | null;
  customTitle: string | null;
  aiTitle: string | null;
  summary: string | null;
  tag: string | null;
  createdAt: string | null;
  modifiedAt: string;
  size: number;
  cwd: string | null;
  gitBranch: string | null;
  lastEntryAt?: string | null;
  messageCount?: number | null;
  live?: Record<string, string | number> | null;
}

export interface Listed {
  op: "Listed";
  id: number;
  sessions: SessionInfo[];
}

export interface Hit {
  sessionId: string;
  project: string;
  path: string;
  title: string | null;
  uuid: string | null;
  timestamp: string | null;
  role: string;
  snippet: string;
  score: number;
  highlights?: [number, number][];
  sidechain?: boolean;
  agentId?: string | null;
  file: string;
  cwd?: string | null;
}

export interface Searched {
  op: "Searched";
  id: number;
  hits: Hit[];
  caughtUp?: boolean;
  window?: number | null;
  scanned?: string | null;
  rebuilt?: string | null;
}

export interface StatusResult {
  op: "StatusResult";
  id: number;
  pid: number;
  version: string;
  root: string;
  socket: string;
  uptime: number;
  sessions: number;
  clients: number;
  watchers?: number;
  [field: string]: unknown;
}

export interface Subscribed {
  op: "Subscribed";
  id: number;
  session: string;
  path: string;
  offset: number;
}

/** Lines of one file of a subscribed session, pushed as they are written. */
export interface Entries {
  op: "Entries";
  id: number;
  /** Relative to the project dir: `<id>.jsonl` or `<id>/subagents/agent-<a>.jsonl`. */
  file: string;
  offset: number;
  lines: Uint8Array[];
  reset?: boolean;
  skipped?: number;
}

export interface Unsubscribed {
  op: "Unsubscribed";
  id: number;
  reason: string;
}

export interface TrashedItem {
  path: string;
  kind: "file" | "dir";
  bytes: number;
  files?: number;
  raw?: Uint8Array | null;
}

export interface TrashEntry {
  name: string;
  session: string;
  project: string;
  trashedAt: string;
  reason: string;
  bytes: number;
  items: TrashedItem[];
  files?: number;
  state?: "trashing" | "trashed" | "restoring" | "restored";
}

export interface TrashChanged {
  op: "TrashChanged";
  id: number;
  entries: TrashEntry[];
}

export interface ErrorFrame {
  op: "Error";
  id: number;
  code: string;
  message: string;
  holder?: LeaseHolder | null;
}

export type Response = Welcome | Appended | Flushed | Done | Opened | Adopted | Listed | Searched | StatusResult
  | Subscribed | Entries | Unsubscribed | TrashChanged | ErrorFrame | { op: string; id: number; [field: string]: unknown };

/** Where a write goes, and how it is acknowledged (Append's and Record's options). */
export interface WriteOptions {
  durability?: Durability;
  /** Route every entry to this agent's transcript (`subagents/agent-<agent>.jsonl`). */
  agent?: string;
  /** Workflow run id: agent files go under `subagents/workflows/<run>/`. */
  run?: string;
  /** Claim (or keep) the session's lease with this batch. */
  lease?: boolean;
  /** Append only: the batch is a copy of a file its writer keeps elsewhere (a
   * SessionStore mirror): written at once, never held for a first message, and
   * the daemon adds no line of its own to the session. */
  exact?: boolean;
  /** Append only: the project dir (a name under `projects/`) of a new session, instead of `cwd`'s. */
  project?: string;
  /** The batch may have been written already (a retry after a failure with an
   * unknown outcome, `DaemonUnavailable.maybeWritten`): the daemon drops what
   * it already has, entries without a uuid included (see the protocol's `resend`). */
  resend?: boolean;
}
