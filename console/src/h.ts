// A tiny DOM builder: h("tr", {dataset: {runId}}, h("td", {}, name)).

export type Child = Node | string | number | null | undefined | false | Child[];

type Handler<K extends keyof HTMLElementEventMap> = (event: HTMLElementEventMap[K]) => void;

export interface Props {
  class?: string;
  id?: string;
  title?: string;
  testid?: string;
  dataset?: Record<string, string | number | undefined>;
  style?: string;
  href?: string;
  target?: string;
  rel?: string;
  type?: string;
  value?: string;
  placeholder?: string;
  name?: string;
  checked?: boolean;
  disabled?: boolean;
  readOnly?: boolean;
  selected?: boolean;
  colSpan?: number;
  min?: string;
  max?: string;
  step?: string;
  htmlFor?: string;
  autocomplete?: string;
  role?: string;
  tabIndex?: number;
  onclick?: Handler<"click">;
  oninput?: Handler<"input">;
  onchange?: Handler<"change">;
  onsubmit?: Handler<"submit">;
  onkeydown?: Handler<"keydown">;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props) as [keyof Props, unknown][]) {
    if (value === undefined) continue;
    if (key === "class") el.className = value as string;
    else if (key === "testid") el.dataset["testid"] = value as string;
    else if (key === "style") el.setAttribute("style", value as string);
    else if (key === "role") el.setAttribute("role", value as string);
    else if (key === "dataset") {
      for (const [name, data] of Object.entries(value as Record<string, unknown>)) {
        if (data !== undefined) el.dataset[name] = String(data);
      }
    } else if (key.startsWith("on")) {
      el.addEventListener(key.slice(2), value as EventListener);
    } else {
      (el as unknown as Record<string, unknown>)[key] = value;
    }
  }
  append(el, children);
  return el;
}

export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
}

/** Replace every child of `parent`. */
export function replace(parent: Node, ...children: Child[]): void {
  (parent as Element).replaceChildren();
  append(parent, children);
}
