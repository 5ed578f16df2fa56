/**
 * The errors the client raises: one tree, mirroring sessiond/wire/errors.py.
 *
 *   SessiondError                 anything this package raises on purpose (`code`)
 *   ├── ProtocolError             bytes that are not a valid frame or message
 *   │   └── FrameTooLarge         a frame over the cap (never sent, never read)
 *   │       └── EntryTooLarge     one entry no frame under the daemon's cap can hold
 *   ├── DaemonUnavailable         no daemon answers, or it stopped answering in time
 *   │   ├── DaemonTimeout         connect or request past its timeout
 *   │   └── UnsafeSocketDir       the socket's dir is not the user's own, mode 0700 (not retried)
 *   ├── WrongRoot                 the daemon serves another store root than asked for
 *   └── RemoteError               the daemon answered with an Error frame
 *       ├── BadRequest, NotFound, TooLarge, PermissionDenied, IoError, ShuttingDown,
 *       │   VersionMismatch, Internal, MirrorUnavailable, Busy, Conflict
 *       └── SessionBusy           another client holds the session (`holder`)
 *           └── LeaseLost         this client held it and it was taken over
 *
 * Every wire code has exactly one class (`REMOTE_ERRORS`); a test checks the
 * table against the Python daemon's `CODES`, so the two cannot drift.
 */

/** Who holds a session's lease (sessiond/wire/lease.py LeaseHolder). */
export interface LeaseHolder {
  session: string;
  pid: number;
  client: string;
  since: string;
  lastWrite?: string | null;
  reconnecting?: boolean;
}

export class SessiondError extends Error {
  readonly code: string;
  constructor(message: string, code = "internal") {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

export class ProtocolError extends SessiondError {
  constructor(message: string, code = "bad_request") {
    super(message, code);
  }
}

export class FrameTooLarge extends ProtocolError {
  constructor(message: string) {
    super(message, "too_large");
  }
}

export class EntryTooLarge extends FrameTooLarge {}

export class DaemonUnavailable extends SessiondError {
  /** A write this error fails was sent, so the daemon may have written it all
   * the same (its outcome is unknown): a retry of it should be a `resend`. */
  maybeWritten = false;
  constructor(message: string, code = "unavailable") {
    super(message, code);
  }
}

export class DaemonTimeout extends DaemonUnavailable {}

/** The socket's directory is a symlink, someone else's, or open to others:
 * nothing in it is trusted. Not retried: waiting does not make it the user's. */
export class UnsafeSocketDir extends DaemonUnavailable {
  constructor(message: string) {
    super(message, "permission_denied");
  }
}

export class WrongRoot extends SessiondError {
  constructor(message: string) {
    super(message, "wrong_root");
  }
}

/** An Error frame from the daemon; `code` is one of the wire codes. */
export class RemoteError extends SessiondError {
  /** The session's holder, for `session_busy` and `lease_lost`. */
  readonly holder: LeaseHolder | null;
  constructor(message: string, code: string, holder: LeaseHolder | null = null) {
    super(message, code);
    this.holder = holder;
  }
}

/** A RemoteError subclass whose instances carry `code` (a subclass may pass its own). */
function remote(code: string) {
  return class extends RemoteError {
    constructor(message: string, holder: LeaseHolder | null = null, subcode: string = code) {
      super(message, subcode, holder);
    }
  };
}

export class BadRequest extends remote("bad_request") {}
export class NotFound extends remote("not_found") {}
export class TooLarge extends remote("too_large") {}
export class PermissionDenied extends remote("permission_denied") {}
export class IoError extends remote("io_error") {}
export class ShuttingDown extends remote("shutting_down") {}
export class VersionMismatch extends remote("version_mismatch") {}
export class Internal extends remote("internal") {}
/** An append refused because the required remote mirror cannot take it. */
export class MirrorUnavailable extends remote("mirror_unavailable") {}
/** A bound is full; nothing of the request was accepted: retry later. */
export class Busy extends remote("busy") {}
/** A lifecycle operation that would overwrite or disturb something. */
export class Conflict extends remote("conflict") {}
/** Another client holds the session; `holder` says who. */
export class SessionBusy extends remote("session_busy") {}
/** This client's lease was taken over: what it sends from now on is refused. */
export class LeaseLost extends SessionBusy {
  constructor(message: string, holder: LeaseHolder | null = null) {
    super(message, holder, "lease_lost");
  }
}

type RemoteErrorClass = new (message: string, holder?: LeaseHolder | null) => RemoteError;

/** The class of each wire error code (sessiond/wire/errors.py CODES). */
export const REMOTE_ERRORS: Readonly<Record<string, RemoteErrorClass>> = Object.freeze({
  bad_request: BadRequest,
  not_found: NotFound,
  too_large: TooLarge,
  permission_denied: PermissionDenied,
  io_error: IoError,
  shutting_down: ShuttingDown,
  version_mismatch: VersionMismatch,
  internal: Internal,
  mirror_unavailable: MirrorUnavailable,
  busy: Busy,
  conflict: Conflict,
  session_busy: SessionBusy,
  lease_lost: LeaseLost,
});

/** The typed error an Error frame stands for (an unknown code: a plain RemoteError). */
export function remoteError(code: string, message: string, holder: LeaseHolder | null = null): RemoteError {
  const cls = Object.prototype.hasOwnProperty.call(REMOTE_ERRORS, code) ? REMOTE_ERRORS[code] : undefined;
  return cls ? new cls(message, holder) : new RemoteError(message, code, holder);
}
