// The script index.html inlines (build.mjs bundles it apart from the app): the first page's
// reads start while app.js still downloads and compiles (see prefetch.ts).

import { startPrefetch } from "./prefetch";

try {
  startPrefetch();
} catch {
  // no early reads (no localStorage, an odd hash): the app makes them itself
}
