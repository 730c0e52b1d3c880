import assert from "node:assert/strict";
import { test } from "node:test";

import { parseJson, pathPart, queryString } from "../src/api";

test("parseJson keeps the API's NaN and infinities as numbers", () => {
  const value = parseJson('{"last": NaN, "max": Infinity, "min": -Infinity, "mean": 1.5}') as Record<string, number>;
  assert.ok(Number.isNaN(value["last"]));
  assert.equal(value["max"], Infinity);
  assert.equal(value["min"], -Infinity);
  assert.equal(value["mean"], 1.5);
});

test("parseJson leaves the words inside strings alone", () => {
  const value = parseJson('{"name": "NaN loss at Infinity \\" NaN", "v": [NaN, 2]}') as { name: string; v: number[] };
  assert.equal(value.name, 'NaN loss at Infinity " NaN');
  assert.ok(Number.isNaN(value.v[0]));
  assert.equal(value.v[1], 2);
});

test("queryString drops empty values; pathPart keeps slashes of metric names", () => {
  assert.equal(queryString({ a: 1, b: undefined, c: "", d: null, e: "x y" }), "?a=1&e=x+y");
  assert.equal(queryString({}), "");
  assert.equal(pathPart("train/loss 1"), "train/loss%201");
});
