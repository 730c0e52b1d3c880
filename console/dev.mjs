// A development server: the built console at /console/ and every other path proxied to the
// API (streams included), so the console runs against any registry before it serves it.
//   MLDIAG_API_URL=http://127.0.0.1:8080 PORT=5173 node dev.mjs   (run `npm run watch` beside it)
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { createServer, request as forward } from "node:http";
import { extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";

const api = new URL(process.env.MLDIAG_API_URL ?? "http://127.0.0.1:8080");
const port = Number(process.env.PORT ?? 5173);
const root = fileURLToPath(
  new URL("../services/run-registry/src/mldiag_run_registry/console/static/", import.meta.url),
);
const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".map": "application/json" };

createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", "http://localhost");
  if (url.pathname === "/" || url.pathname === "/console") {
    res.writeHead(302, { Location: "/console/" }).end();
    return;
  }
  if (url.pathname.startsWith("/console/")) {
    const file = normalize(join(root, url.pathname.slice("/console/".length) || "index.html"));
    if (!file.startsWith(root) || !(await stat(file).catch(() => null))?.isFile()) {
      res.writeHead(404).end("not found");
      return;
    }
    res.writeHead(200, { "Content-Type": types[extname(file)] ?? "application/octet-stream", "Cache-Control": "no-store" });
    createReadStream(file).pipe(res);
    return;
  }
  const upstream = forward(
    { host: api.hostname, port: api.port, path: req.url, method: req.method, headers: { ...req.headers, host: api.host } },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on("error", (error) => res.writeHead(502).end(`API not reachable at ${api}: ${error.message}`));
  res.on("close", () => upstream.destroy());
  req.pipe(upstream);
}).listen(port, "127.0.0.1", () => console.log(`console on http://127.0.0.1:${port}/console/ (API ${api})`));
