export * from "./errors.js";
export * from "./messages.js";
export { Client, Subscription, defaultRoot, defaultSocket, MAX_UNCONFIRMED_BYTES, type ClientOptions } from "./client.js";
export { DEFAULT_MAX_FRAME, PROTOCOL_VERSION, FrameBuffer, encodeFrame, decodeBody } from "./frames.js";
export { DEFAULT_TIMEOUT_MS, SDK_APPEND_TIMEOUT_MS, SessiondSessionStore, storeFileId, storeSessionId, type SessiondSessionStoreOptions, type SessionKey, type SessionStoreEntry, type SessionSummaryEntry } from "./store.js";
