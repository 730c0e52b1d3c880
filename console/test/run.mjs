// Bundles test/*.test.ts with esbuild and runs them with node's test runner.
import { readdir, rm } from "node:fs/promises";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const outdir = join(here, "..", "node_modules", ".cache", "console-tests");
const tests = (await readdir(here)).filter((name) => name.endsWith(".test.ts")).map((name) => join(here, name));
await rm(outdir, { recursive: true, force: true });
await esbuild.build({ entryPoints: tests, outdir, bundle: true, platform: "node", format: "esm", outExtension: { ".js": ".mjs" }, logLevel: "warning" });
const built = (await readdir(outdir)).map((name) => join(outdir, name));
const result = spawnSync(process.execPath, ["--test", ...built], { stdio: "inherit" });
process.exit(result.status ?? 1);
