// The API's JSON shapes (camelCase). The bodies are generated from the contracts in
// schemas/src/mldiag_schemas (generated/contracts.ts, `make contracts`); what is written here
// is the console's own: names it reads them by, and shapes the contracts leave open.

export type {
  RunState,
  Run,
  ListRunsResponse,
  ConfigEntry,
  FlatConfigsResponse,
  ConfigDifference,
  ConfigsDiffResponse,
  MetricSummary,
  MetricBucket,
  DownsampledSeries,
  DownsampleMetricResponse,
  LatestValue,
  ProcessHeartbeat,
  GoodputResponse,
  Severity,
  MetricWindow,
  RecommendedAction,
  AnalyzerReport,
  WorkloadEvent,
  Analysis,
  ProfilerSessionHost,
  ProfilerSession,
  ProfilerTarget,
  Operation,
  ShareLink,
  CreatedShareLink,
  Caller,
  RunUpdate,
  ChannelKind,
  DeliveryState,
  NotificationKind,
  NotificationChannel,
  AlertRule,
  NotificationDelivery,
  TestChannelResponse,
  LogSeverity,
  LogEntry,
  ListLogsResponse,
} from "./generated/contracts";

import type {
  DownsampleMetricResponse,
  ListLogsResponseLogStream,
  RunUpdateKind,
  ShareScopeKind,
} from "./generated/contracts";

// JSON as the console handles it (configs, values of config differences).
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

// Short names the pages use for enums the contracts define inline or under longer names.
export type GroupBy = DownsampleMetricResponse["groupBy"];
export type ShareKind = ShareScopeKind;
export type UpdateKind = RunUpdateKind;
export type LogStream = ListLogsResponseLogStream;
