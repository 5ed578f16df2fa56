/**
 * A real `sessiond serve` for the tests, on a temp root and socket (as
 * tests/conftest.py's DaemonProc starts one). The Python that runs it is
 * $SESSIOND_PYTHON, else the worktree's .venv/bin/python.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
/** client/node, from dist/test. */
export const PACKAGE_DIR = path.resolve(here, "..", "..");
export const REPO = path.resolve(PACKAGE_DIR, "..", "..");
export const PYTHON = process.env.SESSIOND_PYTHON ?? path.join(REPO, ".venv", "bin", "python");

function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createConnection({ path: socket });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

export class Daemon {
  readonly base: string;
  readonly root: string;
  readonly socket: string;
  readonly log: string;
  proc: ChildProcess | null = null;

  /** `config`: TOML for the daemon's config file (SESSIOND_CONFIG). */
  constructor(private readonly config?: string) {
    // Unix socket paths must stay under ~104 bytes: a short dir under /tmp.
    this.base = fs.mkdtempSync(path.join("/tmp", "sdn-"));
    fs.chmodSync(this.base, 0o700);
    this.root = path.join(this.base, "root");
    this.socket = path.join(this.base, "run", "sessiond.sock");
    this.log = path.join(this.base, "daemon.log");
  }

  get env(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...process.env, SESSIOND_ROOT: this.root, SESSIOND_SOCKET: this.socket };
    if (this.config !== undefined) env.SESSIOND_CONFIG = path.join(this.base, "config.toml");
    return env;
  }

  async start(timeoutMs = 20_000): Promise<this> {
    fs.mkdirSync(path.dirname(this.socket), { recursive: true, mode: 0o700 });
    if (this.config !== undefined) fs.writeFileSync(path.join(this.base, "config.toml"), this.config);
    const log = fs.openSync(this.log, "a");
    this.proc = spawn(PYTHON, ["-m", "sessiond.client.cli", "serve", "--log-level", "debug"], {
      env: this.env, stdio: ["ignore", log, log],
    });
    fs.closeSync(log);
    const deadline = Date.now() + timeoutMs;
    while (!(await answers(this.socket))) {
      if (this.proc.exitCode !== null) throw new Error(`daemon exited ${this.proc.exitCode}: ${fs.readFileSync(this.log, "utf-8")}`);
      if (Date.now() > deadline) throw new Error(`daemon did not start: ${fs.readFileSync(this.log, "utf-8")}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return this;
  }

  private waitExit(timeoutMs = 20_000): Promise<void> {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("daemon did not exit")), timeoutMs);
      proc.once("exit", () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Send `signal` to the daemon (SIGSTOP/SIGCONT to freeze it). */
  signal(signal: NodeJS.Signals): void {
    this.proc?.kill(signal);
  }

  async kill(): Promise<void> {
    this.proc?.kill("SIGKILL");
    await this.waitExit();
  }

  async stop(): Promise<void> {
    this.proc?.kill("SIGCONT");
    this.proc?.kill("SIGTERM");
    await this.waitExit();
  }

  /** Stop the daemon and remove its files. */
  async dispose(): Promise<void> {
    await this.stop();
    fs.rmSync(this.base, { recursive: true, force: true });
  }

  /** The sessiond CLI against this daemon (stdout; throws on a non-zero exit). */
  cli(...args: string[]): string {
    const out = spawnSync(PYTHON, ["-m", "sessiond.client.cli", ...args], { env: this.env, encoding: "utf-8", timeout: 30_000 });
    if (out.status !== 0) throw new Error(`sessiond ${args.join(" ")} exited ${out.status}: ${out.stderr}`);
    return out.stdout;
  }
}

