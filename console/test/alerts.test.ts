import assert from "node:assert/strict";
import { test } from "node:test";

import { alertRule, channelPath, channelTarget, deliveriesFilter, webhookChannel } from "../src/alerts";
import { parseHash } from "../src/router";

test("a webhook channel's body: the URL in config, the signing secret only when given", () => {
  assert.deepEqual(webhookChannel({ displayName: " Team ", url: " https://h.example/x ", signingSecret: "" }), {
    displayName: "Team",
    kind: "WEBHOOK",
    config: { url: "https://h.example/x" },
    secrets: {},
  });
  assert.deepEqual(webhookChannel({ displayName: "t", url: "https://h", signingSecret: "s" }).secrets, { signingSecret: "s" });
  assert.equal(channelTarget({ url: "https://h" }), "https://h");
  assert.equal(channelTarget({ to: "a@b.c,d@e.f", smtpHost: "mail" }), "a@b.c,d@e.f");
});

test("a rule's body and the API's paths", () => {
  const rule = alertRule({ displayName: " hangs ", channels: ["hook"], eventTypes: [], minSeverity: "CRITICAL", notifyOnResolve: false });
  assert.deepEqual(rule, { displayName: "hangs", channels: ["hook"], eventTypes: [], minSeverity: "CRITICAL", notifyOnResolve: false });
  assert.equal(channelPath("team-hook", ":test"), "/v1/notificationChannels/team-hook:test");
});

test("the deliveries filter names only what is given, quotes stripped from values", () => {
  assert.equal(deliveriesFilter({ eventId: "e1" }), 'eventId="e1"');
  assert.equal(deliveriesFilter({ runId: "r", state: "DEAD", channel: "" }), 'runId="r" AND state="DEAD"');
  assert.equal(deliveriesFilter({ runId: 'a"b' }), 'runId="ab"');
});

test("#/alerts is the Alerts page; a notification's event link opens the events tab on it", () => {
  assert.deepEqual(parseHash("#/alerts"), { page: "alerts" });
  const route = parseHash("#/runs/r1/events/0f6a-ev");
  assert.equal(route.page, "run");
  if (route.page !== "run") return;
  assert.equal(route.tab, "events");
  assert.equal(route.query.get("event"), "0f6a-ev");
  assert.equal(parseHash("#/runs/r1/metrics/extra").page, "notfound");
});
