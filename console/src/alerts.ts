// The alerts API's paths and the requests the Alerts page sends, kept out of the page so
// they are tested without a browser.

import { pathPart } from "./api";
import type { DeliveryState } from "./types";

export const CHANNELS_PATH = "/v1/notificationChannels";
export const RULES_PATH = "/v1/alertRules";
export const DELIVERIES_PATH = "/v1/notificationDeliveries";

/** Event types a rule may route (mldiag_schemas.events.EventType), for the rule form. */
export const EVENT_TYPES = [
  "PERFORMANCE_DEGRADATION",
  "STRAGGLER",
  "HANG",
  "ORCHESTRATOR_INTERRUPTION",
  "TERMINATION",
  "ACCELERATOR_MEMORY_PRESSURE",
  "HOST_RESOURCE_EXHAUSTION",
  "RECOMPILATION_STORM",
  "INPUT_STALL",
  "CHECKPOINT_STALL",
  "NUMERICAL_INSTABILITY",
  "CONFIG_DRIFT",
] as const;

export const SEVERITIES = ["INFO", "WARNING", "CRITICAL"] as const;

export function channelPath(channelId: string, suffix = ""): string {
  return `${CHANNELS_PATH}/${pathPart(channelId)}${suffix}`;
}

export function rulePath(ruleId: string): string {
  return `${RULES_PATH}/${pathPart(ruleId)}`;
}

/** The `filter` of a deliveries list: each given part as `key="value"`, joined by AND. */
export function deliveriesFilter(parts: { eventId?: string; runId?: string; channel?: string; state?: DeliveryState | "" }): string {
  return Object.entries(parts)
    .filter(([, value]) => value)
    .map(([key, value]) => `${key}="${String(value).replace(/["\\]/g, "")}"`)
    .join(" AND ");
}

export interface WebhookForm {
  displayName: string;
  url: string;
  signingSecret: string;
}

/** The body that creates a webhook channel; an empty signing secret lets the notifier make one. */
export function webhookChannel(form: WebhookForm): Record<string, unknown> {
  const secrets: Record<string, string> = {};
  if (form.signingSecret) secrets["signingSecret"] = form.signingSecret;
  return { displayName: form.displayName.trim(), kind: "WEBHOOK", config: { url: form.url.trim() }, secrets };
}

export interface RuleForm {
  displayName: string;
  channels: string[];
  eventTypes: string[];
  minSeverity: string;
  notifyOnResolve: boolean;
}

export function alertRule(form: RuleForm): Record<string, unknown> {
  return {
    displayName: form.displayName.trim(),
    channels: form.channels,
    eventTypes: form.eventTypes,
    minSeverity: form.minSeverity,
    notifyOnResolve: form.notifyOnResolve,
  };
}

/** Where a channel sends, for a table cell (never a secret: those are not in answers). */
export function channelTarget(config: Record<string, string>): string {
  return config["url"] ?? config["to"] ?? "";
}
