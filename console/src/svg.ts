// A tiny SVG builder, h.ts's twin: s("path", {d, class: "line"}, s("title", {}, "trial 3")).

type Child = Node | string | number | null | undefined | false | Child[];

const NS = "http://www.w3.org/2000/svg";

/** Attributes are set as given (`class`, `d`, `stroke-width`...); `data-*` too; `on*` functions listen. */
export function s<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string | number | undefined | ((event: Event) => void)> = {},
  ...children: Child[]
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(NS, tag) as SVGElementTagNameMap[K];
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined) continue;
    if (typeof value === "function") el.addEventListener(key.replace(/^on/, ""), value);
    else el.setAttribute(key, String(value));
  }
  appendAll(el, children);
  return el;
}

function appendAll(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) appendAll(parent, child);
    else parent.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
}
