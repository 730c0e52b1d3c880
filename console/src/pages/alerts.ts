// Alerts: the notification channels (test one now), the rules that route workload events to
// them, and the recent deliveries with their state and last error. Creates a webhook channel
// and a rule; other channel kinds and settings are the CLI's (`mldiag alerts`). The recent
// deliveries are read again every few seconds while the page is open.

import { ApiError } from "../api";
import {
  alertRule,
  CHANNELS_PATH,
  channelPath,
  channelTarget,
  DELIVERIES_PATH,
  deliveriesFilter,
  EVENT_TYPES,
  RULES_PATH,
  SEVERITIES,
  webhookChannel,
} from "../alerts";
import { formatTime } from "../format";
import { h, replace } from "../h";
import { runHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import type { AlertRule, NotificationChannel, NotificationDelivery, TestChannelResponse } from "../types";
import { card, empty, errorBox, loading } from "../ui";

const REFRESH_MS = 5000;

export function alertsPage(session: Session, scope: Scope): HTMLElement {
  const api = session.api;
  let channels: NotificationChannel[] = [];
  const channelsBox = h("div", { testid: "alert-channels" }, loading("loading channels…"));
  const rulesBox = h("div", { testid: "alert-rules" }, loading("loading rules…"));
  const deliveriesBox = h("div", { testid: "alert-deliveries" }, loading("loading deliveries…"));
  const channelForm = h("div");
  const ruleForm = h("div");

  async function loadChannels(): Promise<void> {
    try {
      const answer = await api.get<{ notificationChannels?: NotificationChannel[] }>(CHANNELS_PATH, { pageSize: 200 }, scope.signal);
      channels = answer.notificationChannels ?? [];
      renderChannels();
      replace(ruleForm, newRuleForm());
    } catch (error) {
      if (!scope.disposed) replace(channelsBox, errorBox(error));
    }
  }

  async function loadRules(): Promise<void> {
    try {
      const answer = await api.get<{ alertRules?: AlertRule[] }>(RULES_PATH, { pageSize: 200 }, scope.signal);
      renderRules(answer.alertRules ?? []);
    } catch (error) {
      if (!scope.disposed) replace(rulesBox, errorBox(error));
    }
  }

  async function loadDeliveries(): Promise<void> {
    try {
      const answer = await api.get<{ notificationDeliveries?: NotificationDelivery[] }>(DELIVERIES_PATH, { pageSize: 50 }, scope.signal);
      replace(deliveriesBox, deliveriesTable(answer.notificationDeliveries ?? [], true));
    } catch (error) {
      if (!scope.disposed) replace(deliveriesBox, errorBox(error));
    }
  }

  function renderChannels(): void {
    if (channels.length === 0) {
      replace(channelsBox, empty("No channels yet: add a webhook below, or any kind with `mldiag alerts channels create`."));
      return;
    }
    replace(
      channelsBox,
      h(
        "table",
        { class: "table channels-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "Channel"), h("th", {}, "Kind"), h("th", {}, "Sends to"), h("th", {}, "Secrets"), h("th", {}, "Enabled"), h("th", {}, ""))),
        h(
          "tbody",
          {},
          channels.map((channel) => {
            const outcome = h("span", { class: "test-outcome", testid: "test-outcome" });
            return h(
              "tr",
              { testid: "channel-row", dataset: { channelId: channel.channelId } },
              h("td", { class: "name" }, channel.displayName, h("span", { class: "sub" }, channel.channelId)),
              h("td", {}, channel.kind),
              h("td", { class: "value" }, channelTarget(channel.config)),
              h("td", {}, channel.secretKeys.map((key) => h("span", { class: "chip" }, key))),
              h("td", {}, channel.enabled ? "yes" : "no"),
              h(
                "td",
                {},
                h("button", { class: "button small", testid: "test-channel", onclick: () => void testChannel(channel.channelId, outcome) }, "Send test"),
                " ",
                outcome,
              ),
            );
          }),
        ),
      ),
    );
  }

  async function testChannel(channelId: string, outcome: HTMLElement): Promise<void> {
    replace(outcome, "sending…");
    try {
      const answer = await api.post<TestChannelResponse>(channelPath(channelId, ":test"), {}, scope.signal);
      replace(outcome, answer.delivered ? h("span", { class: "badge delivery-delivered" }, "delivered") : h("span", { class: "badge delivery-dead", title: answer.error }, `failed: ${answer.error}`));
      void loadDeliveries();
    } catch (error) {
      if (!scope.disposed) replace(outcome, errorBox(error));
    }
  }

  function renderRules(rules: AlertRule[]): void {
    if (rules.length === 0) {
      replace(rulesBox, empty("No rules: nothing is sent until a rule routes events to a channel."));
      return;
    }
    replace(
      rulesBox,
      h(
        "table",
        { class: "table rules-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "Rule"), h("th", {}, "Event types"), h("th", {}, "Least severity"), h("th", {}, "Runs"), h("th", {}, "Channels"), h("th", {}, "On resolve"), h("th", {}, "Enabled"))),
        h(
          "tbody",
          {},
          rules.map((rule) =>
            h(
              "tr",
              { testid: "rule-row", dataset: { ruleId: rule.ruleId } },
              h("td", { class: "name" }, rule.displayName, h("span", { class: "sub" }, rule.ruleId)),
              h("td", {}, rule.eventTypes.length ? rule.eventTypes.join(", ") : "all"),
              h("td", {}, rule.minSeverity),
              h("td", {}, [...rule.runSets.map((set) => `set ${set}`), ...Object.entries(rule.labels).map(([k, v]) => `${k}=${v}`)].join(", ") || "all"),
              h("td", {}, rule.channels.join(", ")),
              h("td", {}, rule.notifyOnResolve ? "notify" : "—"),
              h("td", {}, rule.enabled ? "yes" : "no"),
            ),
          ),
        ),
      ),
    );
  }

  function newChannelForm(): HTMLElement {
    const name = h("input", { placeholder: "display name", testid: "channel-name" });
    const url = h("input", { placeholder: "https://hooks.example.com/mldiag", testid: "channel-url", type: "url" });
    const secret = h("input", { placeholder: "signing secret (optional)", testid: "channel-secret", type: "password", autocomplete: "off" });
    const message = h("div");
    return h(
      "form",
      {
        class: "alert-form",
        testid: "channel-form",
        onsubmit: (event) => {
          event.preventDefault();
          void (async () => {
            try {
              await api.post(CHANNELS_PATH, webhookChannel({ displayName: name.value, url: url.value, signingSecret: secret.value }), scope.signal);
              name.value = url.value = secret.value = "";
              replace(message);
              await loadChannels();
            } catch (error) {
              if (!scope.disposed) replace(message, errorBox(error));
            }
          })();
        },
      },
      h("b", {}, "New webhook channel"),
      name,
      url,
      secret,
      h("button", { class: "button", type: "submit" }, "Create"),
      message,
    );
  }

  function newRuleForm(): HTMLElement {
    if (channels.length === 0) return h("p", { class: "muted" }, "A rule needs a channel: create one first.");
    const name = h("input", { placeholder: "display name", testid: "rule-name" });
    const severity = h("select", { testid: "rule-severity" }, SEVERITIES.map((s) => h("option", { value: s, selected: s === "WARNING" }, `${s} and above`)));
    const resolve = h("input", { type: "checkbox", checked: true, testid: "rule-resolve" });
    const channelBoxes = channels.map((c) => h("input", { type: "checkbox", value: c.channelId, checked: channels.length === 1, testid: "rule-channel" }));
    const typeBoxes = EVENT_TYPES.map((t) => h("input", { type: "checkbox", value: t }));
    const message = h("div");
    return h(
      "form",
      {
        class: "alert-form",
        testid: "rule-form",
        onsubmit: (event) => {
          event.preventDefault();
          const body = alertRule({
            displayName: name.value,
            channels: channelBoxes.filter((box) => box.checked).map((box) => box.value),
            eventTypes: typeBoxes.filter((box) => box.checked).map((box) => box.value),
            minSeverity: severity.value,
            notifyOnResolve: resolve.checked,
          });
          void (async () => {
            try {
              await api.post(RULES_PATH, body, scope.signal);
              name.value = "";
              replace(message);
              await loadRules();
            } catch (error) {
              if (!scope.disposed) replace(message, errorBox(error));
            }
          })();
        },
      },
      h("b", {}, "New rule"),
      name,
      severity,
      h("label", {}, resolve, "also when it resolves"),
      h("span", { class: "chips" }, "to: ", channels.map((c, i) => h("label", { class: "chip" }, channelBoxes[i] ?? null, c.channelId))),
      h("details", {}, h("summary", {}, "Event types (none checked: all)"), h("div", { class: "chips" }, EVENT_TYPES.map((t, i) => h("label", { class: "chip" }, typeBoxes[i] ?? null, t)))),
      h("button", { class: "button", type: "submit" }, "Create"),
      message,
    );
  }

  replace(channelForm, newChannelForm());
  void loadChannels();
  void loadRules();
  void loadDeliveries();
  const timer = window.setInterval(() => void loadDeliveries(), REFRESH_MS);
  scope.add(() => window.clearInterval(timer));

  return h(
    "div",
    { class: "page alerts-page", testid: "alerts-page" },
    h("h2", {}, "Alerts"),
    card("Channels", channelsBox, channelForm),
    card("Rules", rulesBox, ruleForm),
    card("Recent deliveries", deliveriesBox),
  );
}

/** Deliveries as a table: when, what, where, how it went (and why not). */
export function deliveriesTable(deliveries: NotificationDelivery[], withEvent: boolean): HTMLElement {
  if (deliveries.length === 0) return empty("No notifications sent.");
  return h(
    "table",
    { class: "table compact deliveries-table" },
    h(
      "thead",
      {},
      h("tr", {}, h("th", {}, "Decided"), h("th", {}, "Kind"), h("th", {}, "State"), h("th", { class: "num" }, "Attempts"), h("th", {}, "Channel"), h("th", {}, "Rule"), withEvent ? h("th", {}, "Event") : null, h("th", {}, "Last error")),
    ),
    h(
      "tbody",
      {},
      deliveries.map((d) =>
        h(
          "tr",
          { testid: "delivery-row", dataset: { state: d.state, kind: d.kind } },
          h("td", { title: d.deliverTime ? `delivered ${d.deliverTime}` : "" }, formatTime(d.createTime)),
          h("td", {}, d.kind),
          h("td", {}, h("span", { class: `badge delivery-${d.state.toLowerCase()}` }, d.state)),
          h("td", { class: "num" }, String(d.attempts)),
          h("td", {}, d.channel),
          h("td", {}, d.rule || "—"),
          withEvent ? h("td", {}, d.runId && d.eventId ? h("a", { href: runHref(d.runId, "events", { event: d.eventId }) }, d.runId) : "—") : null,
          h("td", { class: "value" }, d.lastError || ""),
        ),
      ),
    ),
  );
}

/** The event view's section: the notifications sent (or not) about one event. Callers
 *  without the permission, or a stack without a notifier, see why instead. */
export function eventDeliveries(session: Session, scope: Scope, eventId: string): HTMLElement {
  const box = h("section", { class: "card event-deliveries", testid: "event-deliveries" }, h("h4", {}, "Notifications"), loading("loading notifications…"));
  void (async () => {
    try {
      const answer = await session.api.get<{ notificationDeliveries?: NotificationDelivery[] }>(
        DELIVERIES_PATH,
        { filter: deliveriesFilter({ eventId }), pageSize: 50 },
        scope.signal,
      );
      replace(box, h("h4", {}, "Notifications"), deliveriesTable(answer.notificationDeliveries ?? [], false));
    } catch (error) {
      if (scope.disposed) return;
      const quiet = error instanceof ApiError && (error.status === 403 || error.status === 404);
      replace(box, h("h4", {}, "Notifications"), quiet ? h("p", { class: "muted" }, "Not available here.") : errorBox(error));
    }
  })();
  return box;
}
