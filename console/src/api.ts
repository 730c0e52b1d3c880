// The API client: same-origin calls under /v1 with a bearer token, errors as ApiError.

import { type Query, queryString } from "./paths";
import { takePrefetched } from "./prefetch";

/** An error answer of the API (`{"error": {"code", "message", "details"}}`) or a transport failure. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: unknown[] = [],
  ) {
    super(message);
  }
}

export { type Query, queryString } from "./paths";

export { pathPart } from "./paths";

const SENTINELS: Record<string, number> = {
  "\u0000NaN": NaN,
  "\u0000Inf": Infinity,
  "\u0000-Inf": -Infinity,
};

/**
 * JSON.parse that accepts the bare `NaN`, `Infinity` and `-Infinity` tokens the API writes
 * for non-finite metric values (a NaN loss is data, not an error).
 */
export function parseJson(text: string): unknown {
  if (!/NaN|Infinity/.test(text)) return JSON.parse(text);
  let out = "";
  let last = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i++; // backslash: skip the escaped character
      else if (c === 34) inString = false;
      continue;
    }
    let token = "";
    let sentinel = "";
    if (c === 34) inString = true;
    else if (c === 78 && text.startsWith("NaN", i)) [token, sentinel] = ["NaN", "NaN"];
    else if (c === 73 && text.startsWith("Infinity", i)) [token, sentinel] = ["Infinity", "Inf"];
    else if (c === 45 && text.startsWith("-Infinity", i)) [token, sentinel] = ["-Infinity", "-Inf"];
    if (token) {
      out += `${text.slice(last, i)}"\\u0000${sentinel}"`;
      i += token.length - 1;
      last = i + 1;
    }
  }
  out += text.slice(last);
  return JSON.parse(out, (_key, value: unknown) =>
    typeof value === "string" && value.charCodeAt(0) === 0 && value in SENTINELS ? SENTINELS[value] : value,
  );
}

/** An HTTP answer read whole: what the client needs of a Response (an early read keeps one). */
export interface Answer {
  ok: boolean;
  status: number;
  statusText: string;
  text: string;
}

/** A fetch's answer, its body read (a failed body read leaves it empty). */
export async function readAnswer(response: Response): Promise<Answer> {
  const text = await response.text().catch(() => "");
  return { ok: response.ok, status: response.status, statusText: response.statusText, text };
}

function errorOf(response: Answer): ApiError {
  const text = response.text;
  try {
    const body = parseJson(text) as {
      error?: { code?: string | number; message?: string; details?: unknown[]; status?: string };
      detail?: unknown;
    };
    // The Vertex-shaped APIs (training) answer google.rpc.Status: a number, and the name in `status`.
    if (typeof body.error?.code === "number" && body.error.status) {
      return new ApiError(response.status, body.error.status, body.error.message ?? "", body.error.details ?? []);
    }
    if (typeof body.error?.code === "string" && body.error.code) {
      return new ApiError(response.status, body.error.code, body.error.message ?? "", body.error.details ?? []);
    }
    if (typeof body.detail === "string") return new ApiError(response.status, httpCode(response.status), body.detail);
  } catch {
    // not JSON: fall through
  }
  return new ApiError(response.status, httpCode(response.status), text.slice(0, 300) || response.statusText);
}

function httpCode(status: number): string {
  return (
    { 400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found", 409: "conflict" }[
      status
    ] ?? `http_${status}`
  );
}

export class Api {
  /** Called on every 401 (the console's session goes back to sign-in; a share view does not). */
  onUnauthenticated: ((error: ApiError) => void) | null = null;

  constructor(readonly token: string) {}

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { Authorization: `Bearer ${this.token}`, ...extra };
  }

  /** An early read's answer (see prefetch.ts), handled as `request` handles one. */
  async answer<T>(early: Promise<Answer>, signal?: AbortSignal): Promise<T> {
    let response: Answer;
    try {
      response = await early;
      signal?.throwIfAborted();
    } catch (error) {
      if (signal?.aborted) throw error;
      throw new ApiError(0, "unavailable", `the API did not answer (${String(error)})`);
    }
    return this.handle<T>(response);
  }

  async request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    let response: Answer;
    try {
      const init: RequestInit = { method, headers: this.headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
      if (body !== undefined) init.body = JSON.stringify(body);
      if (signal) init.signal = signal;
      // A read index.html's inline script already made (see prefetch.ts), else a fetch. An
      // early answer already in is taken without leaving the task (a resolved promise): the
      // page goes on to its next reads before the browser renders anything.
      const early = method === "GET" && body === undefined ? takePrefetched(path, this.token) : null;
      const network = async (): Promise<Answer> => readAnswer(await fetch(path, init));
      response = early ? await early.catch(network) : await network();
      signal?.throwIfAborted();
    } catch (error) {
      if (signal?.aborted) throw error;
      throw new ApiError(0, "unavailable", `the API did not answer (${String(error)})`);
    }
    return this.handle<T>(response);
  }

  private handle<T>(response: Answer): T {
    if (!response.ok) {
      const error = errorOf(response);
      if (response.status === 401) this.onUnauthenticated?.(error);
      throw error;
    }
    return (response.text ? parseJson(response.text) : {}) as T;
  }

  get<T>(path: string, query: Query = {}, signal?: AbortSignal): Promise<T> {
    return this.request<T>("GET", path + queryString(query), undefined, signal);
  }

  post<T>(path: string, body: unknown = {}, signal?: AbortSignal): Promise<T> {
    return this.request<T>("POST", path, body, signal);
  }

  delete<T>(path: string, signal?: AbortSignal): Promise<T> {
    return this.request<T>("DELETE", path, undefined, signal);
  }
}

export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && error.name === "AbortError";
}
