// Bundles the console into the run-registry's static directory (served at /console/).
//   node build.mjs            one production build
//   node build.mjs --watch    rebuild on every change (see dev.mjs for a server)
//   NOMINIFY=1 node build.mjs  a readable bundle, e.g. for a CPU profile's function names
import { createHash } from "node:crypto";
import { copyFile, mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
// The runbooks the analyzers' reports link to go into the build (served at /console/runbooks/),
// so an installed registry serves its own version's runbooks without a source checkout.
const runbooks = join(here, "..", "docs", "runbooks");

async function copyRunbooks(dir) {
  await mkdir(join(dir, "runbooks"), { recursive: true });
  const names = await readdir(runbooks).catch((error) => {
    if (error.code !== "ENOENT") throw error;
    throw new Error(`no runbooks at ${runbooks}: the console serves them (a Docker stage must copy docs/runbooks/ too)`);
  });
  for (const name of names) {
    if (name.endsWith(".md")) await copyFile(join(runbooks, name), join(dir, "runbooks", name));
  }
}
/** The first 16 hex digits of the SHA-256 of `bytes`: the `?v=` of an asset's URL. The registry
 * computes the same (console/handlers.py) and lets browsers keep such a URL for good. */
export function contentVersion(bytes) {
  return createHash("sha256").update(bytes).digest("hex").slice(0, 16);
}

/**
 * index.html as served: the early-reads script (src/prefetchboot.ts) inlined where the
 * template says `<!-- prefetch -->`, and app.css / app.js referenced with their content's
 * version, so a new build is fetched at once and an unchanged one never again.
 */
async function writeIndex(dir) {
  const boot = await esbuild.build({
    entryPoints: [join(here, "src", "prefetchboot.ts")],
    bundle: true,
    format: "iife",
    target: ["es2022", "chrome110", "firefox115", "safari16"],
    minify: true,
    write: false,
    legalComments: "none",
  });
  const script = boot.outputFiles[0].text.trim().replaceAll("</", "<\\/");
  let html = await readFile(join(here, "index.html"), "utf8");
  if (!html.includes("<!-- prefetch -->")) throw new Error("index.html lacks its <!-- prefetch --> placeholder");
  html = html.replace("<!-- prefetch -->", () => `<script>${script}</script>`);
  for (const name of ["app.css", "app.js"]) {
    const bytes = await readFile(join(dir, name));
    // the attribute only: the inline script names app.js too (its fallback)
    html = html.replace(`href="${name}"`, `href="${name}?v=${contentVersion(bytes)}"`);
    // A gzipped copy, sent to browsers that take gzip (a third of the bytes over a network).
    await writeFile(join(dir, `${name}.gz`), gzipSync(bytes, { level: 9 }));
  }
  await writeFile(join(dir, "index.html"), html);
}

export const outdir = join(
  here, "..", "services", "run-registry", "src", "mldiag_run_registry", "console", "static",
);

/**
 * uPlot builds two Intl formatters when its module loads: ICU's data loaded in a fresh
 * renderer, half of the bundle's 40-50 ms start on a first visit (2 CPUs), before any chart
 * exists. The console formats its own axis values, so these are made when first used. The
 * patterns are checked: a new uPlot that lacks them fails the build rather than losing the
 * saving unseen.
 */
const UPLOT_LAZY_INTL = [
  [
    "const numFormatter = new Intl.NumberFormat(domEnv ? nav.language : 'en-US');\nconst fmtNum = val => numFormatter.format(val);",
    "let numFormatter = null;\nconst fmtNum = val => (numFormatter ??= new Intl.NumberFormat(domEnv ? nav.language : 'en-US')).format(val);",
  ],
  [
    "const localTz = new Intl.DateTimeFormat().resolvedOptions().timeZone;",
    "let localTzName = null;\nconst localTz = () => (localTzName ??= new Intl.DateTimeFormat().resolvedOptions().timeZone);",
  ],
  ["else if (tz == localTz)", "else if (tz == localTz())"],
];

/** @type {esbuild.Plugin} */
const lazyUplotIntl = {
  name: "uplot-lazy-intl",
  setup(build) {
    build.onLoad({ filter: /uplot[\\/]dist[\\/]uPlot\.esm\.js$/ }, async (args) => {
      let source = await readFile(args.path, "utf8");
      for (const [from, to] of UPLOT_LAZY_INTL) {
        if (source.split(from).length !== 2) throw new Error(`uPlot changed: "${from}" is not in ${args.path} once`);
        source = source.replace(from, () => to);
      }
      return { contents: source, loader: "js" };
    });
  },
};

/** @type {(dir: string) => esbuild.BuildOptions} */
const options = (dir) => ({
  entryPoints: { app: join(here, "src", "main.ts") },
  outdir: dir,
  bundle: true,
  format: "esm",
  target: ["es2022", "chrome110", "firefox115", "safari16"],
  minify: !process.env.NOMINIFY,
  sourcemap: "linked",
  legalComments: "linked",
  logLevel: "info",
  plugins: [
    lazyUplotIntl,
    {
      name: "index-html",
      setup(build) {
        build.onEnd(async (result) => {
          if (result.errors.length > 0) return;
          await writeIndex(dir);
          await copyRunbooks(dir);
        });
      },
    },
  ],
});

if (process.argv.includes("--watch")) {
  await mkdir(outdir, { recursive: true });
  const context = await esbuild.context(options(outdir));
  await context.watch();
} else {
  // Build beside the served directory, then swap it in: a registry serving the console
  // never finds it missing or half-written.
  const next = `${outdir}.next`;
  const old = `${outdir}.old`;
  await rm(next, { recursive: true, force: true });
  await mkdir(next, { recursive: true });
  await esbuild.build(options(next));
  await rm(old, { recursive: true, force: true });
  await rename(outdir, old).catch((error) => {
    if (error.code !== "ENOENT") throw error;
  });
  await rename(next, outdir);
  await rm(old, { recursive: true, force: true });
}
