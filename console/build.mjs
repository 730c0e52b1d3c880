// Bundles the console into the run-registry's static directory (served at /console/).
//   node build.mjs            one production build
//   node build.mjs --watch    rebuild on every change (see dev.mjs for a server)
import { copyFile, mkdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
export const outdir = join(
  here, "..", "services", "run-registry", "src", "mldiag_run_registry", "console", "static",
);

/** @type {esbuild.BuildOptions} */
const options = {
  entryPoints: { app: join(here, "src", "main.ts") },
  outdir,
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
          if (result.errors.length === 0) await copyFile(join(here, "index.html"), join(outdir, "index.html"));
        });
      },
    },
  ],
};

await rm(outdir, { recursive: true, force: true });
await mkdir(outdir, { recursive: true });
if (process.argv.includes("--watch")) {
  const context = await esbuild.context(options);
  await context.watch();
} else {
  await esbuild.build(options);
}
