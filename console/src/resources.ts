// The training API's resource names and paths under a project and location (custom jobs,
// tuning jobs, models): `/v1/projects/p/locations/l/<collection>` and
// `projects/p/locations/l/<collection>/<id>`, read back into a parent and an id.

import { pathPart } from "./api";
import { DEFAULT_LOCATION, DEFAULT_PROJECT, type Parent } from "./router";

/** `/v1/projects/p/locations/l/<collection>`: where a parent's resources are listed and created. */
export function collectionPath(parent: Parent, collection: string): string {
  return `/v1/projects/${pathPart(parent.project)}/locations/${pathPart(parent.location)}/${collection}`;
}

/** One resource, `suffix` such as `:cancel` or `/replicas` (the id escaped whole, `@` included). */
export function resourcePath(parent: Parent, collection: string, id: string, suffix = ""): string {
  return `${collectionPath(parent, collection)}/${encodeURIComponent(id)}${suffix}`;
}

/**
 * `projects/p/locations/l/<collection>/<id>` → its parent and id (null if not that shape).
 * `versioned`: the name may end in `@<version>` (a model's), which is not part of the id.
 */
export function parseResourceName(name: string, collection: string, versioned = false): { parent: Parent; id: string } | null {
  const id = versioned ? "([^/@]+)(?:@[^/]+)?" : "([^/]+)";
  const match = new RegExp(`^projects/([^/]+)/locations/([^/]+)/${collection}/${id}$`).exec(name);
  if (!match) return null;
  const [, project = DEFAULT_PROJECT, location = DEFAULT_LOCATION, resourceId = ""] = match;
  return { parent: { project, location }, id: resourceId };
}

/** A resource's id from its name; a name of another shape: its last segment. */
export function resourceIdOf(name: string, collection: string, versioned = false): string {
  return parseResourceName(name, collection, versioned)?.id ?? name.split("/").pop() ?? name;
}
