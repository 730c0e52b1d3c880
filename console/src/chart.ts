// One metric chart on uPlot: downsampled buckets as a mean line with a min–max band, NaN
// buckets marked, drag to zoom (refetched at the finer resolution), double-click to reset,
// x by step or by time, an optional smoothed line over the faint raw one, an optional log y
// axis, and a CSV of what it drew. Data comes from a loader, so the same chart serves a run's
// metrics, a comparison of runs and the events timeline.

import uPlot from "uplot";

import { isAbort } from "./api";
import { csvFileName, toCsv } from "./csv";
import { formatClock, formatNumber, formatTicks } from "./format";
import { h, replace } from "./h";
import { decadeTicks, positiveOnly } from "./scales";
import { smooth } from "./smoothing";
import { Throttle } from "./throttle";
import type { MetricBucket } from "./types";

export interface ChartLine {
  label: string;
  color: string;
  buckets: MetricBucket[];
}

export interface StepRange {
  startStep: number;
  endStep: number;
}

export type XMode = "step" | "time";

export interface LoadRequest {
  buckets: number;
  range: StepRange | null;
  withTimes: boolean;
  signal: AbortSignal;
}

export type Loader = (request: LoadRequest) => Promise<ChartLine[]>;

export interface ChartOptions {
  metric: string;
  title?: string;
  loader: Loader;
  xMode?: XMode;
  height?: number;
  /** Load when scrolled into view (default) or at once. */
  lazy?: boolean;
  /** The x range to show when not zoomed (seconds in time mode), e.g. a run's lifetime. */
  xExtent?: () => [number, number] | null;
  /** Drawn after the series, on the canvas (event spans). */
  drawOverlay?: (u: uPlot) => void;
  /** After every draw (DOM overlays positioned from the scales). */
  onDraw?: (u: uPlot) => void;
  /** EMA weight, 0 (raw) to 0.99: the smoothed line drawn over the faint raw one. */
  smoothing?: number;
  /** A log y axis (values ≤ 0 left out, and counted in a note). */
  logScale?: boolean;
  /** Offer the drawn series as CSV, named `<csvName>-<metric>.csv` (e.g. the run's id). */
  csvName?: string;
}

export interface Look {
  smoothing: number;
  logScale: boolean;
}

export const PALETTE = [
  "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c",
  "#0891b2", "#db2777", "#65a30d", "#4f46e5", "#b45309",
];

export function lineColor(index: number): string {
  return PALETTE[index % PALETTE.length] ?? "#2563eb";
}

let firstChartMarked = false;

/** The x axis's tick spacings by step: 1, 2 and 5 times the powers of ten (whole steps only). */
const STEP_INCREMENTS = Array.from({ length: 16 }, (_, power) => [1, 2, 5].map((m) => m * 10 ** power)).flat();

/** A chart this close below (or above) the viewport loads as if in view. */
const VISIBLE_MARGIN_PX = 300;

/**
 * New charts are built a task apart: the first is drawn (and can be painted) before the next
 * is built, not all of them in one long task. Each new chart awaits its turn.
 */
let buildQueue: Promise<void> = Promise.resolve();

function turnToBuild(): Promise<void> {
  const turn = buildQueue;
  buildQueue = turn.then(() => new Promise<void>((resolve) => setTimeout(resolve, 0)));
  return turn;
}

const visible = new WeakMap<Element, () => void>();
let observer: IntersectionObserver | null = null;

function whenVisible(el: Element, callback: () => void): () => void {
  observer ??= new IntersectionObserver(
    (entries) => {
      for (const entry of entries) {
        if (!entry.isIntersecting) continue;
        observer?.unobserve(entry.target);
        visible.get(entry.target)?.();
        visible.delete(entry.target);
      }
    },
    { rootMargin: `${VISIBLE_MARGIN_PX}px 0px` },
  );
  visible.set(el, callback);
  observer.observe(el);
  return () => {
    observer?.unobserve(el);
    visible.delete(el);
  };
}

interface Built {
  data: uPlot.AlignedData;
  series: uPlot.Series[];
  bands: uPlot.Band[];
  nanXs: number[];
  nanBuckets: number;
  /** Per line: its mean series' index in `data` (the raw values, also when smoothed). */
  meanIndex: number[];
  /** Points left out of a log chart: ≤ 0 or infinite. */
  droppedForLog: number;
  /** The lowest and highest value drawn (a log chart's range comes from them; log10 there). */
  extent: [number, number] | null;
}

function finite(value: number | null): number | null {
  return value !== null && Number.isFinite(value) ? value : null;
}

function xOf(bucket: MetricBucket, mode: XMode): number | null {
  if (mode === "step") return bucket.lastStep;
  return bucket.lastTime ? Date.parse(bucket.lastTime) / 1000 : null;
}

function build(lines: ChartLine[], mode: XMode, look: Look): Built {
  const xsSet = new Set<number>();
  for (const line of lines) {
    for (const bucket of line.buckets) {
      const x = xOf(bucket, mode);
      if (x !== null) xsSet.add(x);
    }
  }
  const xs = Float64Array.from(xsSet).sort();
  const index = new Map<number, number>();
  xs.forEach((x, i) => index.set(x, i));
  const withBand = lines.length === 1; // one line: its min–max band; more: too busy
  const data: (number | null)[][] = [];
  const series: uPlot.Series[] = [{}];
  const bands: uPlot.Band[] = [];
  const meanIndex: number[] = [];
  const nanSet = new Set<number>();
  let nanBuckets = 0;
  let droppedForLog = 0;
  const forScale = (values: (number | null)[], counted: boolean): (number | null)[] => {
    if (!look.logScale) return values;
    // Drawn as log10 on a linear scale, not uPlot's log scale: that one gives up on values
    // past 17 digits, and a diverging run's loss reaches 1e36.
    const kept = positiveOnly(values);
    if (counted) droppedForLog += kept.dropped;
    return kept.values.map((value) => (value === null ? null : Math.log10(value)));
  };
  for (const line of lines) {
    const mean: (number | null)[] = new Array<number | null>(xs.length).fill(null);
    const min: (number | null)[] = withBand ? new Array<number | null>(xs.length).fill(null) : [];
    const max: (number | null)[] = withBand ? new Array<number | null>(xs.length).fill(null) : [];
    let spread = false;
    for (const bucket of line.buckets) {
      const x = xOf(bucket, mode);
      if (x === null) continue;
      const i = index.get(x) ?? 0;
      mean[i] = finite(bucket.mean);
      if (withBand) {
        min[i] = finite(bucket.min);
        max[i] = finite(bucket.max);
        if (bucket.count > 1 && bucket.min !== bucket.max) spread = true;
      }
      if (bucket.nanCount > 0) {
        nanBuckets++;
        nanSet.add(x);
      }
    }
    const raw = mean; // finite or a gap: smoothed, never written (the CSV has the buckets)
    meanIndex.push(data.length + 1);
    if (look.smoothing > 0) {
      data.push(forScale(raw, true));
      series.push({ label: `${line.label} raw`, stroke: `${line.color}40`, width: 1, spanGaps: true, points: { show: false } });
      data.push(forScale(smooth(raw, look.smoothing), false));
      series.push({ label: line.label, stroke: line.color, width: 1.5, spanGaps: true });
    } else {
      data.push(forScale(raw, true));
      series.push({ label: line.label, stroke: line.color, width: 1.5, spanGaps: true });
    }
    if (withBand && spread) {
      const maxIndex = data.length + 1;
      data.push(forScale(max, false), forScale(min, false));
      const edge: uPlot.Series = { stroke: "transparent", width: 0, spanGaps: true, points: { show: false } };
      series.push({ ...edge, label: `${line.label} max` }, { ...edge, label: `${line.label} min` });
      bands.push({ series: [maxIndex, maxIndex + 1], fill: `${line.color}22` });
    }
  }
  let lo = Infinity;
  let hi = -Infinity;
  for (const values of data) {
    for (const value of values) {
      if (value === null) continue;
      lo = Math.min(lo, value);
      hi = Math.max(hi, value);
    }
  }
  return {
    data: [Array.from(xs), ...data] as uPlot.AlignedData,
    series,
    bands,
    nanXs: Array.from(nanSet),
    nanBuckets,
    meanIndex,
    droppedForLog,
    extent: lo <= hi ? [lo, hi] : null,
  };
}

export class MetricChart {
  readonly el: HTMLDivElement;
  private readonly body: HTMLDivElement;
  private readonly readout: HTMLSpanElement;
  private readonly badge: HTMLSpanElement;
  private readonly zoomNote: HTMLSpanElement;
  private readonly logNote: HTMLSpanElement;
  private readonly legend: HTMLDivElement;
  private readonly message: HTMLDivElement;
  private u: uPlot | null = null;
  private shape = "";
  private built: Built | null = null;
  private lines: ChartLine[] = [];
  private zoom: StepRange | null = null;
  private xMode: XMode;
  private look: Look;
  private loader: Loader;
  private started = false;
  /** The lines in hand were read with times (even if none of their buckets has one). */
  private timesRead = false;
  private controller: AbortController | null = null;
  private readonly refresher: Throttle;
  private zoomTimer: ReturnType<typeof setTimeout> | undefined;
  private stopObserving: (() => void) | null = null;
  private readonly resize: ResizeObserver;
  private readonly height: number;
  /** The body's width as last measured or reported by the ResizeObserver (0: not known). */
  private bodyWidth = 0;
  /** The x values of the data being drawn (reported as data-points once drawn). */
  private pendingPoints = 0;

  constructor(private readonly options: ChartOptions) {
    this.xMode = options.xMode ?? "step";
    this.look = { smoothing: options.smoothing ?? 0, logScale: options.logScale ?? false };
    this.loader = options.loader;
    this.height = options.height ?? 170;
    this.readout = h("span", { class: "chart-readout" });
    this.badge = h("span", { class: "nan-badge", testid: "nan-badge" });
    this.badge.hidden = true;
    this.zoomNote = h("span", { class: "zoom-note" });
    this.logNote = h("span", { class: "log-note", testid: "log-note" });
    this.logNote.hidden = true;
    const csv =
      options.csvName === undefined
        ? null
        : h("button", { class: "link chart-csv", testid: "chart-csv", title: "Download the drawn points (raw, not smoothed) as CSV", onclick: () => void this.downloadCsv() }, "CSV");
    this.body = h("div", { class: "chart-body", style: `height:${this.height}px` });
    this.message = h("div", { class: "chart-message" }, "loading…");
    this.legend = h("div", { class: "chart-legend" });
    this.el = h(
      "div",
      { class: "chart", testid: "chart", dataset: { metric: options.metric } },
      h(
        "div",
        { class: "chart-head" },
        h("span", { class: "chart-title", title: options.metric }, options.title ?? options.metric),
        this.badge,
        this.logNote,
        this.zoomNote,
        this.readout,
        csv,
      ),
      this.body,
      this.legend,
    );
    this.body.append(this.message);
    this.refresher = new Throttle(() => this.load(), 1000);
    this.resize = new ResizeObserver((entries) => {
      this.bodyWidth = Math.floor(entries[entries.length - 1]?.contentRect.width ?? 0);
      if (this.u) this.u.setSize({ width: this.width(), height: this.height });
    });
    this.resize.observe(this.body);
    if (options.lazy === false) queueMicrotask(() => this.start());
    else this.stopObserving = whenVisible(this.el, () => this.start());
  }

  /**
   * Load those of `charts` in (or near) view now, without waiting for the visibility
   * observer's next frame: a page that just placed its charts calls it (a first chart
   * sooner). All are measured before any starts, so the page is laid out once, not once per
   * chart (starting one changes the page).
   */
  static startVisible(charts: Iterable<MetricChart>): void {
    const inView = [...charts].filter((chart) => chart.measureInView());
    for (const chart of inView) {
      chart.stopObserving?.();
      chart.stopObserving = null;
      chart.start();
    }
  }

  /** Whether the chart is placed, shown and in (or near) view; its width noted on the way. */
  private measureInView(): boolean {
    if (this.started || !this.el.isConnected || this.el.hidden) return false;
    const box = this.el.getBoundingClientRect();
    const margin = VISIBLE_MARGIN_PX;
    this.bodyWidth = this.body.clientWidth;
    return box.bottom >= -margin && box.top <= innerHeight + margin && box.right >= 0 && box.left <= innerWidth && box.width > 0;
  }

  /** Refetch what is shown (live updates): at most once a second, always a trailing one. */
  refresh(): void {
    if (this.started) this.refresher.trigger();
  }

  setXMode(mode: XMode): void {
    if (mode === this.xMode) return;
    this.xMode = mode;
    if (!this.started) return;
    if (mode === "time" && !this.hasTimes()) void this.load();
    else this.draw();
  }

  /** Smoothing and the y scale, redrawn from the data in hand (no refetch). */
  setLook(look: Look): void {
    if (look.smoothing === this.look.smoothing && look.logScale === this.look.logScale) return;
    this.look = { ...look };
    if (this.started && this.built) this.draw();
  }

  /** The drawn lines as CSV (see csv.ts), built from the buckets in hand. */
  csv(): string {
    return toCsv(this.lines);
  }

  private async downloadCsv(): Promise<void> {
    // A chart by step reads without times (half the server's work); the CSV's time column
    // needs them, so it reads what is shown again, with times, first.
    if (!this.hasTimes()) await this.load(true);
    const url = URL.createObjectURL(new Blob([this.csv()], { type: "text/csv;charset=utf-8" }));
    const link = h("a", { href: url });
    link.download = csvFileName(this.options.csvName ?? "metric", this.options.metric);
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  }

  setLoader(loader: Loader): void {
    this.loader = loader;
    if (this.started) void this.load();
  }

  /** Draw again without refetching (an overlay changed). */
  redraw(): void {
    this.u?.redraw(false);
  }

  resetZoom(): void {
    if (this.zoom === null) return;
    this.zoom = null;
    void this.load();
  }

  dispose(): void {
    this.refresher.stop();
    clearTimeout(this.zoomTimer);
    this.controller?.abort();
    this.stopObserving?.();
    this.resize.disconnect();
    this.u?.destroy();
    this.u = null;
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    this.refresher.trigger();
  }

  /** The chart's width in pixels: as noted when known, else measured (a layout). */
  private width(): number {
    return Math.max(200, Math.floor(this.bodyWidth || this.body.clientWidth || this.el.clientWidth || 400));
  }

  /** Whether the lines in hand carry their buckets' times (a read with `withTimes`). */
  private hasTimes(): boolean {
    return this.timesRead || this.lines.some((line) => line.buckets.some((b) => b.lastTime));
  }

  /** Read what is shown (with times when by time, or when `withTimes`), then draw it. */
  private async load(withTimes = false): Promise<void> {
    this.controller?.abort();
    const controller = new AbortController();
    this.controller = controller;
    this.el.classList.add("loading");
    try {
      const lines = await this.loader({
        buckets: Math.min(2000, Math.max(50, Math.round(this.width()))),
        range: this.zoom,
        withTimes: withTimes || this.xMode === "time",
        signal: controller.signal,
      });
      if (controller.signal.aborted) return;
      if (!this.u) await turnToBuild();
      if (controller.signal.aborted) return;
      this.lines = lines;
      this.timesRead = withTimes || this.xMode === "time";
      this.draw();
    } catch (error) {
      if (isAbort(error) || controller.signal.aborted) return;
      this.showMessage(`${(error as { code?: string }).code ?? "error"}: ${(error as Error).message}`, true);
    } finally {
      if (this.controller === controller) this.el.classList.remove("loading");
    }
  }

  private showMessage(text: string, isError = false): void {
    this.message.textContent = text;
    this.message.className = isError ? "chart-message chart-error" : "chart-message";
    this.message.hidden = false;
    if (!this.message.isConnected) this.body.append(this.message);
  }

  private draw(): void {
    const built = build(this.lines, this.xMode, this.look);
    this.built = built;
    const points = built.data[0].length;
    const shape = `${this.xMode}|${this.look.logScale ? "log" : "linear"}|${built.series.map((s) => s.label).join("|")}`;
    if (this.u && shape === this.shape) {
      this.u.setData(built.data);
    } else {
      this.u?.destroy();
      this.shape = shape;
      this.u = new uPlot(this.uplotOptions(built), built.data, this.body);
    }
    if (points === 0) this.showMessage(this.xMode === "time" ? "no points with times" : "no points");
    else this.message.hidden = true;
    this.badge.hidden = built.nanBuckets === 0;
    this.badge.textContent = `NaN ×${built.nanBuckets}`;
    this.badge.title = `${built.nanBuckets} bucket(s) hold NaN values (red ticks)`;
    this.el.dataset["nanBuckets"] = String(built.nanBuckets);
    this.el.dataset["smoothing"] = String(this.look.smoothing);
    this.el.dataset["yScale"] = this.look.logScale ? "log" : "linear";
    this.el.dataset["logDropped"] = String(built.droppedForLog);
    this.logNote.hidden = built.droppedForLog === 0;
    this.logNote.textContent = `${built.droppedForLog} ≤ 0 not drawn`;
    this.logNote.title = `${built.droppedForLog} point(s) are zero, negative or infinite: a log axis cannot place them`;
    this.zoomNote.replaceChildren();
    if (this.zoom) {
      this.zoomNote.append(
        `steps ${this.zoom.startStep}–${this.zoom.endStep} `,
        h("button", { class: "link", onclick: () => this.resetZoom(), title: "or double-click the chart" }, "reset"),
      );
    }
    replace(
      this.legend,
      this.lines.length > 1 &&
        this.lines.map((line) =>
          h("span", { class: "legend-item" }, h("i", { style: `background:${line.color}` }), line.label),
        ),
    );
    this.pendingPoints = points;
    this.setReadout(null);
  }

  private uplotOptions(built: Built): uPlot.Options {
    const time = this.xMode === "time";
    const log = this.look.logScale;
    const decades = (): { range: [number, number]; ticks: number[] } => {
      const extent = this.built?.extent; // log10 of the values
      const { range, ticks } = extent ? decadeTicks(10 ** extent[0], 10 ** extent[1]) : decadeTicks(NaN, NaN);
      return { range: [Math.log10(range[0]), Math.log10(range[1])], ticks: ticks.map(Math.log10) };
    };
    return {
      width: this.width(),
      height: this.height,
      legend: { show: false },
      cursor: {
        drag: { x: true, y: false, setScale: false },
        points: { size: 5 },
      },
      scales: {
        x: {
          time,
          range: (_u, min, max) => {
            // uPlot widens a lone x on a time scale by 86400 / ms (1000 days in seconds).
            const xs = this.built?.data[0];
            const lone = xs?.length === 1 ? xs[0] : undefined;
            if (typeof lone === "number") min = max = lone;
            const extent = this.zoom ? null : this.options.xExtent?.();
            if (extent) return [Math.min(min, extent[0]), Math.max(max, extent[1])];
            if (min === max) return [min - 1, max + 1];
            return [min, max];
          },
        },
        ...(log ? { y: { range: (): uPlot.Range.MinMax => decades().range } } : {}),
      },
      axes: [
        {
          stroke: "#6b7280",
          grid: { stroke: "#eef0f3", width: 1 },
          ticks: { stroke: "#e5e7eb", width: 1 },
          // Steps are whole numbers: no tick between two (a lone point at step 100 once got
          // "99 99.5 100 101 101", 100.5 rounded to three digits).
          ...(time ? {} : { values: (_u: uPlot, splits: number[]) => formatTicks(splits), incrs: STEP_INCREMENTS }),
          // Time labels (":38.500") are wider than step numbers: space them out.
          space: time ? 90 : 50,
          font: "11px system-ui, sans-serif",
        },
        {
          stroke: "#6b7280",
          grid: { stroke: "#eef0f3", width: 1 },
          ticks: { stroke: "#e5e7eb", width: 1 },
          values: (_u: uPlot, splits: number[]) => formatTicks(splits.map((tick) => (log ? 10 ** tick : tick))),
          ...(log ? { splits: () => decades().ticks } : {}),
          size: 46,
          font: "11px system-ui, sans-serif",
        },
      ],
      series: built.series,
      bands: built.bands,
      hooks: {
        draw: [(u) => this.afterDraw(u)],
        setSelect: [(u) => this.onSelect(u)],
        setCursor: [(u) => this.setReadout(u.cursor.idx ?? null)],
        ready: [
          (u) =>
            u.over.addEventListener("dblclick", () => {
              this.resetZoom();
            }),
        ],
      },
    };
  }

  private afterDraw(u: uPlot): void {
    const built = this.built;
    if (built && built.nanXs.length) {
      const ctx = u.ctx;
      ctx.save();
      ctx.fillStyle = "#dc2626";
      const top = u.bbox.top;
      const size = 5 * devicePixelRatio;
      for (const x of built.nanXs) {
        const px = u.valToPos(x, "x", true);
        if (px < u.bbox.left - 1 || px > u.bbox.left + u.bbox.width + 1) continue;
        ctx.beginPath();
        ctx.moveTo(px - size, top);
        ctx.lineTo(px + size, top);
        ctx.lineTo(px, top + size * 1.4);
        ctx.fill();
        ctx.fillRect(px - 0.5 * devicePixelRatio, top, devicePixelRatio, u.bbox.height);
      }
      ctx.restore();
    }
    this.options.drawOverlay?.(u);
    this.options.onDraw?.(u);
    this.el.dataset["points"] = String(this.pendingPoints);
    this.el.dataset["ready"] = "true";
    if (!firstChartMarked) {
      firstChartMarked = true;
      performance.mark("mldiag:first-chart");
    }
  }

  private onSelect(u: uPlot): void {
    const { left, width } = u.select;
    if (width < 4) return;
    const min = u.posToVal(left, "x");
    const max = u.posToVal(left + width, "x");
    u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    const range = this.stepsBetween(min, max);
    if (!range) return;
    this.zoom = range;
    u.setScale("x", { min, max }); // at once; the refetch brings the finer buckets
    clearTimeout(this.zoomTimer);
    this.zoomTimer = setTimeout(() => void this.load(), 150);
  }

  private stepsBetween(min: number, max: number): StepRange | null {
    if (this.xMode === "step") {
      const startStep = Math.max(0, Math.floor(min));
      const endStep = Math.ceil(max);
      return endStep >= startStep ? { startStep, endStep } : null;
    }
    let startStep = Infinity;
    let endStep = -Infinity;
    for (const line of this.lines) {
      for (const bucket of line.buckets) {
        const x = xOf(bucket, "time");
        if (x === null || x < min || x > max) continue;
        startStep = Math.min(startStep, bucket.firstStep);
        endStep = Math.max(endStep, bucket.lastStep);
      }
    }
    return Number.isFinite(startStep) ? { startStep, endStep } : null;
  }

  private setReadout(idx: number | null): void {
    const built = this.built;
    if (!built || !this.u) {
      this.readout.textContent = "";
      return;
    }
    const xs = built.data[0];
    const i = idx ?? xs.length - 1;
    const x = xs[i];
    if (x === undefined) {
      this.readout.textContent = "";
      return;
    }
    const xText = this.xMode === "time" ? formatClock(new Date(x * 1000)) : `step ${x}`;
    const values = built.meanIndex.map((series, line) => {
      const drawn = built.data[series]?.[i];
      const value = this.look.logScale && typeof drawn === "number" ? 10 ** drawn : drawn;
      const label = this.lines.length > 1 ? `${this.lines[line]?.label ?? ""} ` : "";
      return value === null || value === undefined ? null : `${label}${formatNumber(value)}`;
    });
    this.readout.textContent = `${xText} · ${values.filter(Boolean).slice(0, 4).join(" · ") || "—"}`;
  }
}
