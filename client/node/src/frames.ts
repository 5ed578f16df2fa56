/**
 * Frames on the socket: a 4-byte big-endian length, then a msgpack body
 * (sessiond/wire/frames.py). Bodies are maps whose `op` field names the
 * message (msgspec's tagged unions); fields at their default are left out.
 */
import { decode, encode, ExtensionCodec } from "@msgpack/msgpack";
import { FrameTooLarge, ProtocolError } from "./errors.js";

export const HEADER_SIZE = 4;
/** The daemon's default frame cap; its Welcome announces the one it uses. */
export const DEFAULT_MAX_FRAME = 64 * 1024 * 1024;
export const PROTOCOL_VERSION = 1;
/** msgpack extension code of a str that is not valid UTF-8 (sessiond/wire/fsnames.py). */
export const EXT_TEXT = 1;

const extensions = new ExtensionCodec();
const utf8 = new TextDecoder("utf-8");
extensions.register({
  type: EXT_TEXT,
  encode: () => null,
  // A file name that is not UTF-8: shown with U+FFFD where its bytes are not.
  decode: (data: Uint8Array) => utf8.decode(data),
});

/** One complete frame for `message` (undefined fields left out). */
export function encodeFrame(message: Record<string, unknown>): Uint8Array {
  const body = encode(message, { ignoreUndefined: true, extensionCodec: extensions });
  const frame = new Uint8Array(HEADER_SIZE + body.length);
  new DataView(frame.buffer).setUint32(0, body.length, false);
  frame.set(body, HEADER_SIZE);
  return frame;
}

export function decodeBody(body: Uint8Array): Record<string, unknown> {
  let value: unknown;
  try {
    value = decode(body, { extensionCodec: extensions });
  } catch (err) {
    throw new ProtocolError(`malformed response: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value) || typeof (value as { op?: unknown }).op !== "string") {
    throw new ProtocolError("malformed response: not a message");
  }
  return value as Record<string, unknown>;
}

/** Incremental splitter of a byte stream into frame bodies; refuses a header
 * announcing more than `maxFrame` before waiting for (or holding) its body. */
export class FrameBuffer {
  private chunks: Buffer[] = [];
  private length = 0;
  constructor(public maxFrame: number = DEFAULT_MAX_FRAME) {}

  feed(data: Buffer): Uint8Array[] {
    this.chunks.push(data);
    this.length += data.length;
    const out: Uint8Array[] = [];
    while (this.length >= HEADER_SIZE) {
      // The chunks are joined only once a whole frame is here: a big frame
      // arriving in many reads is copied once, not once a read.
      if (this.chunks[0].length < HEADER_SIZE) this.join();
      const size = this.chunks[0].readUInt32BE(0);
      if (size > this.maxFrame) {
        throw new FrameTooLarge(`frame of ${size} bytes exceeds the ${this.maxFrame}-byte cap`);
      }
      if (this.length < HEADER_SIZE + size) break;
      const buf = this.join();
      out.push(buf.subarray(HEADER_SIZE, HEADER_SIZE + size));
      const rest = buf.subarray(HEADER_SIZE + size);
      this.chunks = rest.length ? [rest] : [];
      this.length = rest.length;
    }
    return out;
  }

  /** Bytes of an incomplete frame held. */
  get pending(): number {
    return this.length;
  }

  private join(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks, this.length)];
    return this.chunks[0];
  }
}
