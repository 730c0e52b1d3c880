// Bundles the console into the run-registry's static directory (served at /console/).
//   node build.mjs            one production build
//   node build.mjs --watch    rebuild on every change (see dev.mjs for a server)
import { copyFile, mkdir, readdir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
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
export const outdir = join(
  here, "..", "services", "run-registry", "src", "mldiag_run_registry", "console", "static",
);

/** @type {(dir: string) => esbuild.BuildOptions} */
const options = (dir) => ({
  entryPoints: { app: join(here, "src", "main.ts") },
  outdir: dir,
  bundle: true,
  format: "esm",
  target: ["es2022", "chrome110", "firefox115", "safari16"],
  minify: true,
  sourcemap: "linked",
  legalComments: "linked",
  logLevel: "info",
  plugins: [
    {
      name: "index-html",
      setup(build) {
        build.onEnd(async (result) => {
          if (result.errors.length > 0) return;
          await copyFile(join(here, "index.html"), join(dir, "index.html"));
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
