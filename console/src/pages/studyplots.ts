// A study's two SVG plots: the objective over trials (a point per trial, the best-so-far step
// line) and the parallel coordinates (an axis per parameter, then the objective; a line per
// trial coloured from the worst value to the best). The shapes come from ../trialplots.ts;
// this module only draws them. A click on a trial's point or line calls `onPick`.

import { formatNumber } from "../format";
import type { Axis } from "../scales";
import { rampColor } from "../scales";
import { s } from "../svg";
import { lineSegments, type ObjectiveModel, type ParallelModel, pathData, stepPath, type Point } from "../trialplots";
import { formatParameter, type Goal } from "../tuning";

const NO_OBJECTIVE = "#9ca3af";
const BEST_LINE = "#15803d";
const POINT = "#2563eb";

export interface PlotOptions {
  goal: Goal;
  metricId: string;
  selected: ReadonlySet<string>;
  onPick: (trialId: string) => void;
}

function pick(onPick: (trialId: string) => void, trialId: string): (event: Event) => void {
  return (event) => {
    event.stopPropagation();
    onPick(trialId);
  };
}

/** The objective's final value per trial (x = trial id) and the best so far. */
export function objectivePlot(model: ObjectiveModel, options: PlotOptions): SVGSVGElement {
  const [width, height] = [540, 260];
  const [left, right, top, bottom] = [52, 14, 12, height - 36];
  const x = (value: number): number => left + (model.xAxis.position(value) ?? 0) * (width - left - right);
  const y = (value: number): number => bottom - (model.yAxis.position(value) ?? 0) * (bottom - top);
  const best: Point[] = model.best.map((point) => [x(point.x), y(point.value)]);
  const last = best.at(-1);
  if (last) best.push([width - right, last[1]]); // the best holds until the study's last trial
  const bestValue = model.best.at(-1)?.value;
  return s(
    "svg",
    {
      class: "plot objective-plot",
      viewBox: `0 0 ${width} ${height}`,
      "data-testid": "objective-plot",
      "data-points": model.points.length,
      "data-y-scale": model.yAxis.kind === "log" ? "log" : "linear",
      "data-left-out": model.leftOut,
      "data-best": bestValue,
      "data-best-trial": model.bestTrialId ?? undefined,
      role: "img",
      "aria-label": `${options.metricId} by trial`,
    },
    // axes
    model.yAxis.ticks.map((tick) => {
      const ty = bottom - tick.at * (bottom - top);
      return s(
        "g",
        { class: "tick" },
        s("line", { x1: left, x2: width - right, y1: ty, y2: ty, class: "grid" }),
        s("text", { x: left - 6, y: ty + 4, "text-anchor": "end" }, tick.label),
      );
    }),
    model.xAxis.ticks.map((tick) => {
      const tx = left + tick.at * (width - left - right);
      return s("text", { class: "tick", x: tx, y: bottom + 16, "text-anchor": "middle" }, tick.label);
    }),
    s("line", { class: "axis", x1: left, x2: width - right, y1: bottom, y2: bottom }),
    s("line", { class: "axis", x1: left, x2: left, y1: top, y2: bottom }),
    s("text", { class: "axis-label", x: (left + width - right) / 2, y: height - 4, "text-anchor": "middle" }, "trial"),
    // the best so far, then the points over it
    best.length
      ? s("path", { class: "best-line", d: stepPath(best), stroke: BEST_LINE, fill: "none", "data-testid": "best-line" }, s("title", {}, `best so far (${options.goal === "MINIMIZE" ? "lowest" : "highest"})`))
      : null,
    model.points.map((point) =>
      s(
        "circle",
        {
          class: `point${options.selected.has(point.trialId) ? " selected" : ""}${point.record ? " record" : ""}`,
          cx: x(point.x),
          cy: y(point.value),
          r: point.record ? 5 : 4,
          fill: point.stoppedEarly ? "#fff" : point.record ? BEST_LINE : POINT,
          stroke: point.record ? BEST_LINE : POINT,
          "data-trial-id": point.trialId,
          onclick: pick(options.onPick, point.trialId),
        },
        s("title", {}, `trial ${point.trialId}: ${options.metricId} = ${formatNumber(point.value)}${point.stoppedEarly ? " (stopped early)" : ""}${point.record ? " · new best" : ""}`),
      ),
    ),
  );
}

/** One axis per parameter then the objective; one line per trial. */
export function parallelPlot(model: ParallelModel, options: PlotOptions): SVGSVGElement {
  const gap = 130;
  const [left, right, top, bottom] = [60, 70, 34, 290];
  const width = Math.max(720, left + right + gap * Math.max(1, model.axes.length - 1));
  const height = bottom + 16;
  const step = model.axes.length > 1 ? (width - left - right) / (model.axes.length - 1) : 0;
  const xs = model.axes.map((_, i) => left + i * step);
  // Lines without an objective (infeasible, or not ended) first, then worst to best: the best on top.
  const rows = [...model.rows].sort((a, b) => (a.goodness ?? -1) - (b.goodness ?? -1));
  return s(
    "svg",
    {
      class: "plot parallel-plot",
      viewBox: `0 0 ${width} ${height}`,
      "data-testid": "parallel-plot",
      "data-axes": model.axes.length,
      "data-lines": model.rows.length,
      role: "img",
      "aria-label": "parallel coordinates of the trials",
    },
    rows.map((row) => {
      const segments = lineSegments(model.axes, row.values, xs, top, bottom);
      const color = row.goodness === null ? NO_OBJECTIVE : rampColor(row.goodness);
      const described = model.axes
        .map((axis, i) => `${axis.id} = ${formatParameter(row.values[i] ?? null)}`)
        .join(", ");
      return s(
        "path",
        {
          class: `pc-line${row.goodness === null ? " no-objective" : ""}${options.selected.has(row.trialId) ? " selected" : ""}`,
          d: pathData(segments),
          stroke: color,
          fill: "none",
          "data-trial-id": row.trialId,
          "data-goodness": row.goodness ?? undefined,
          onclick: pick(options.onPick, row.trialId),
        },
        s("title", {}, `trial ${row.trialId} (${row.state.toLowerCase()}${row.stoppedEarly ? ", stopped early" : ""}): ${described}`),
      );
    }),
    model.axes.map((axis, i) => axisGroup(axis, xs[i] ?? 0, top, bottom, i === model.axes.length - 1, options.goal)),
  );
}

function axisGroup(axis: Axis, x: number, top: number, bottom: number, objective: boolean, goal: Goal): SVGGElement {
  const scale = axis.kind === "log" ? " · log" : axis.kind === "reverse_log" ? " · reverse log" : "";
  return s(
    "g",
    { class: `pc-axis${objective ? " objective" : ""}`, "data-axis": axis.id, "data-kind": axis.kind },
    s("line", { class: "axis", x1: x, x2: x, y1: top, y2: bottom }),
    s("text", { class: "axis-label", x, y: top - 18, "text-anchor": "middle" }, truncate(axis.id, 18), s("title", {}, axis.label)),
    s("text", { class: "axis-scale", x, y: top - 6, "text-anchor": "middle" }, objective ? (goal === "MINIMIZE" ? "objective · min" : "objective · max") : `${axis.kind === "category" ? "categorical" : "numeric"}${scale}`),
    axis.ticks.map((tick) => {
      const y = bottom - tick.at * (bottom - top);
      return s(
        "g",
        { class: "tick" },
        s("line", { x1: x - 3, x2: x + 3, y1: y, y2: y }),
        s("text", { x: x + 6, y: y + 4 }, truncate(tick.label, 14)),
      );
    }),
  );
}

function truncate(text: string, length: number): string {
  return text.length > length ? `${text.slice(0, length - 1)}…` : text;
}
