// The console's token, kept in the browser's localStorage between visits (its own module: the
// early reads of prefetch.ts need it without the API client).

const TOKEN_KEY = "mldiag.token";

/** The token a previous visit signed in with, if any (null also where storage is refused). */
export function storedToken(): string | null {
  try {
    return localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** Keep `token` for the next visits (null: forget it). */
export function storeToken(token: string | null): void {
  try {
    if (token === null) localStorage.removeItem(TOKEN_KEY);
    else localStorage.setItem(TOKEN_KEY, token);
  } catch {
    // private mode: the token lives as long as the page
  }
}
