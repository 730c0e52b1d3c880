// Who is using the console: the API client with its token, and what the caller may do.

import { Api, ApiError } from "./api";
import type { Caller } from "./types";

export { storedToken, storeToken } from "./token";

export class Session {
  constructor(
    readonly api: Api,
    /** null when the registry has no `/v1/caller` (then the API itself refuses what it must). */
    readonly caller: Caller | null,
  ) {}

  /** A share link's read-only view. */
  get shared(): boolean {
    return this.caller?.role === "shared";
  }

  can(permission: string): boolean {
    if (this.caller === null) return true;
    return this.caller.permissions.includes(permission);
  }
}

export async function openSession(token: string): Promise<Session> {
  const api = new Api(token);
  try {
    return new Session(api, await api.get<Caller>("/v1/caller"));
  } catch (error) {
    // A registry that predates `/v1/caller`: check the token with a call every role may make.
    if (error instanceof ApiError && error.status === 404) {
      await api.get("/v1/machineLearningRuns", { pageSize: 1 });
      return new Session(api, null);
    }
    throw error;
  }
}
