// The API's JSON shapes (camelCase), mirroring schemas/src/mldiag_schemas. Only the fields
// the console reads are listed; timestamps are RFC 3339 strings.

export type RunState = "STATE_ACTIVE" | "STATE_COMPLETED" | "STATE_FAILED";

export interface Run {
  name: string;
  runId: string;
  displayName: string;
  runSet: string;
  labels: Record<string, string>;
  configs: { softwareConfigs: JsonObject; hardwareConfigs: JsonObject; userConfigs: JsonObject };
  state: RunState;
  runPhase: string;
  orchestrator: string;
  createTime: string;
  updateTime: string;
  endTime: string | null;
  errorDetails: { code: string | null; message: string; reason: string | null } | null;
  workloadId: string;
  metrics: {
    avgStepTime: number | null;
    avgMfu: number | null;
    avgThroughput: number | null;
    avgLatency: number | null;
  };
}

export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export interface ListRunsResponse {
  machineLearningRuns: Run[];
  nextPageToken: string;
}

export interface ConfigEntry {
  section: "softwareConfigs" | "hardwareConfigs" | "userConfigs";
  key: string;
  value: Json;
}

export interface FlatConfigsResponse {
  run: string;
  entries: ConfigEntry[];
}

export interface ConfigDifference {
  section: ConfigEntry["section"];
  key: string;
  change: "ADDED" | "REMOVED" | "CHANGED" | "UNCHANGED";
  baseValue: Json;
  otherValue: Json;
}

export interface ConfigsDiffResponse {
  base: string;
  other: string;
  differences: ConfigDifference[];
}

export interface MetricSummary {
  name: string;
  pointCount: number;
  lastStep: number;
}

export interface MetricBucket {
  startStep: number;
  endStep: number;
  firstStep: number;
  lastStep: number;
  count: number;
  nanCount: number;
  min: number | null;
  max: number | null;
  mean: number | null;
  last: number;
  lastTime?: string | null;
}

export interface DownsampledSeries {
  runId: string;
  host: string | null;
  processIndex: number | null;
  labels: Record<string, string> | null;
  buckets: MetricBucket[];
}

export type GroupBy = "none" | "host" | "series";

export interface DownsampleMetricResponse {
  metric: string;
  bucketWidth: number;
  source: string;
  groupBy: GroupBy;
  startStep?: number | null;
  endStep?: number | null;
  series: DownsampledSeries[];
}

export interface LatestValue {
  name: string;
  host: string;
  processIndex: number | null;
  labels: Record<string, string>;
  step: number;
  value: number;
  time: string;
  pointCount: number;
}

export interface ProcessHeartbeat {
  host: string;
  processIndex: number;
  pid: number;
  step: number | null;
  intervalSeconds: number;
  lastSeenTime: string;
  firstSeenTime: string;
  overdue: boolean;
}

export interface GoodputResponse {
  wallSeconds: number;
  productiveSeconds: number;
  goodput: number;
  steps: number;
  reference: string;
  buckets: { kind: string; seconds: number; fraction: number }[];
}

export type Severity = "INFO" | "WARNING" | "CRITICAL";

export interface MetricWindow {
  metric: string;
  host: string;
  startStep: number | null;
  endStep: number | null;
  startTime: string | null;
  endTime: string | null;
  observed: number | null;
  baseline: number | null;
  count: number;
}

export interface RecommendedAction {
  description: string;
  documentationUrl: string;
}

export interface AnalyzerReport {
  analyzer: string;
  layer: string;
  detectionState: "DETECTED" | "NOT_DETECTED";
  details: string;
  hosts: string[];
  evidence: string[];
  score: number;
  recommendedActions: RecommendedAction[];
}

export interface WorkloadEvent {
  name: string;
  eventId: string;
  runId: string;
  type: string;
  displayName: string;
  severity: Severity;
  state: "OPEN" | "RESOLVED";
  startTime: string;
  endTime: string | null;
  rule: string;
  thresholds: Record<string, number>;
  hosts: string[];
  evidence: {
    metric: string;
    host: string;
    firstBadStep: number | null;
    firstBadValue: number | null;
    lastGoodStep: number | null;
    lastGoodValue: number | null;
    windows: MetricWindow[];
    facts: JsonObject;
  };
  timeLostSeconds: number;
  analyzerInsightFound: boolean;
  analyzerReports: AnalyzerReport[];
}

export interface Analysis {
  analysisId: string;
  eventId: string;
  runId: string;
  analyzerInsightFound: boolean;
  reports: AnalyzerReport[];
  probableCause: string;
  timeLostSeconds: number;
  captureRequested: boolean;
  createTime: string;
}

export interface ProfilerSessionHost {
  host: string;
  phase: string;
  startTime: string | null;
  endTime: string | null;
  fileUri: string;
  sizeBytes: number;
  error: string;
}

export interface ProfilerSession {
  name: string;
  sessionId: string;
  runId: string;
  kind: "PROGRAMMATIC" | "ON_DEMAND" | "SNAPSHOT";
  phase: "ACTIVE" | "SUCCEEDED" | "FAILED";
  hosts: ProfilerSessionHost[];
  durationSeconds: number | null;
  storageFolderUri: string;
  dashboardUri: string;
  autoCaptured: boolean;
  monitoredEvents: string[];
  operation: string;
  prewarmed: boolean;
  createTime: string;
  updateTime: string;
  endTime: string | null;
}

export interface ProfilerTarget {
  targetId: string;
  host: string;
  processIndex: number;
  address: string;
}

export interface Operation {
  name: string;
  done: boolean;
  metadata: { verb: string; target: string; createTime: string; endTime: string | null };
  response?: unknown;
  error?: { code: string; message: string } | null;
}

export type ShareKind = "RUN" | "EVENT" | "PROFILER_SESSION";

export interface ShareLink {
  name: string;
  linkId: string;
  resource: string;
  kind: ShareKind;
  runId: string;
  eventId: string | null;
  sessionId: string | null;
  displayName: string;
  state: "ACTIVE" | "EXPIRED" | "REVOKED";
  createdBy: string;
  createTime: string;
  expireTime: string;
  revokeTime: string | null;
}

export interface CreatedShareLink {
  shareLink: ShareLink;
  token: string;
  url: string;
}

export interface Caller {
  tokenId: string;
  role: "viewer" | "editor" | "admin" | "shared";
  permissions: string[];
  share: ShareLink | null;
}

export type UpdateKind = "run" | "metrics" | "events" | "analyses" | "profiles";

export interface RunUpdate {
  runId: string;
  kind: UpdateKind;
  metrics?: string[];
}

// Alerts (the notifier, behind the one base URL): mldiag_schemas.alerts.

export type ChannelKind = "WEBHOOK" | "SLACK" | "EMAIL" | "ALERTMANAGER" | "APPRISE";
export type DeliveryState = "PENDING" | "RETRYING" | "DELIVERED" | "SUPPRESSED" | "DEAD";
export type NotificationKind = "OPENED" | "RESOLVED" | "TEST";

export interface NotificationChannel {
  name: string;
  channelId: string;
  displayName: string;
  kind: ChannelKind;
  config: Record<string, string>;
  /** Write only: always empty in answers (see secretKeys). */
  secrets: Record<string, string>;
  secretKeys: string[];
  enabled: boolean;
  createTime: string | null;
  updateTime: string | null;
}

export interface AlertRule {
  name: string;
  ruleId: string;
  displayName: string;
  enabled: boolean;
  eventTypes: string[];
  minSeverity: string;
  runSets: string[];
  labels: Record<string, string>;
  channels: string[];
  notifyOnResolve: boolean;
  groupWindowSeconds: number;
  maxPerHour: number;
  createTime: string | null;
  updateTime: string | null;
}

export interface NotificationDelivery {
  name: string;
  deliveryId: string;
  channel: string;
  rule: string;
  kind: NotificationKind;
  runId: string;
  eventId: string | null;
  state: DeliveryState;
  attempts: number;
  lastError: string;
  createTime: string;
  nextAttemptTime: string | null;
  deliverTime: string | null;
}

export interface TestChannelResponse {
  delivered: boolean;
  error: string;
  delivery: NotificationDelivery | null;
}

export type LogStream = "STDOUT" | "STDERR" | "OTLP" | "SYSTEM";

export type LogSeverity = "DEFAULT" | "DEBUG" | "INFO" | "WARNING" | "ERROR" | "CRITICAL";

export interface LogEntry {
  time: string;
  host: string;
  stream: LogStream;
  severity: LogSeverity;
  text: string;
  processIndex: number | null;
  pid: number | null;
}

export interface ListLogsResponse {
  entries?: LogEntry[];
  nextPageToken?: string;
}
