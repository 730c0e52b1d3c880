import assert from "node:assert/strict";
import { test } from "node:test";

import { lineText, logsAroundHref, logsQuery, severityColour, sinceAround } from "../src/pages/logs";

test("lines around an event start a minute before it", () => {
  assert.equal(sinceAround("2026-05-01T12:00:30Z"), "2026-05-01T11:59:30.000Z");
  assert.equal(sinceAround(null), "");
  assert.equal(sinceAround("not a time"), "");
  assert.equal(logsAroundHref("#/runs/r1", "2026-05-01T12:00:30Z"), "#/runs/r1/events?around=2026-05-01T12%3A00%3A30Z");
  assert.equal(logsAroundHref("#/runs/r1", "2026-05-01T12:00:30Z", "e1"), "#/runs/r1/events?event=e1&around=2026-05-01T12%3A00%3A30Z");
});

test("logsQuery sends only the filters set, and the cursor", () => {
  const filters = { grep: "boom|oom", host: "", stream: "STDERR", minSeverity: "", since: "" };
  assert.deepEqual(logsQuery(filters, ""), { pageSize: "1000", grep: "boom|oom", stream: "STDERR" });
  assert.deepEqual(logsQuery({ ...filters, grep: "" }, "abc"), { pageSize: "1000", stream: "STDERR", pageToken: "abc" });
});

test("severities are coloured, plain lines are not", () => {
  assert.equal(severityColour("ERROR"), "var(--bad)");
  assert.equal(severityColour("CRITICAL"), "var(--bad)");
  assert.equal(severityColour("WARNING"), "var(--warn)");
  assert.equal(severityColour("DEFAULT"), "");
  const entry = { time: "2026-05-01T12:00:00Z", host: "h0", stream: "STDERR", severity: "ERROR", text: "boom", processIndex: null, pid: null } as const;
  assert.equal(lineText(entry), "2026-05-01T12:00:00Z h0 stderr  boom");
  assert.equal(lineText({ ...entry, host: "" }), "2026-05-01T12:00:00Z - stderr  boom");
});
