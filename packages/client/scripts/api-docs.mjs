// Renders the package's API reference (docs/javascript-client-api.md) from its generated types
// (dist/*.d.ts): every exported declaration with its doc comment, in source order. `node
// scripts/api-docs.mjs` writes the page; `--check` only says whether it is up to date (CI).

import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.join(here, "..");
const out = path.join(root, "..", "..", "docs", "javascript-client-api.md");

const ENTRIES = [
  ["@mcp-progress-bridge/client", "dist/index.d.ts"],
  ["@mcp-progress-bridge/client/react", "dist/react.d.ts"],
];

/** Top-level declarations of a .d.ts: `{name, kind, doc, code}`. */
function declarations(text) {
  const lines = text.split("\n");
  const found = [];
  let doc = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith("/**")) {
      doc = [line];
      while (!lines[i].includes("*/")) doc.push(lines[++i]);
      continue;
    }
    const head = /^export (?:declare )?(function|const|class|interface|type) (\w+)/.exec(line);
    if (!head) {
      if (line.trim() && !line.startsWith("import ")) doc = [];
      continue;
    }
    const code = [line];
    let depth = (line.match(/[{(]/g) ?? []).length - (line.match(/[})]/g) ?? []).length;
    while (depth > 0 || !/[;}]\s*$/.test(code.at(-1))) {
      const next = lines[++i];
      code.push(next);
      depth += (next.match(/[{(]/g) ?? []).length - (next.match(/[})]/g) ?? []).length;
    }
    found.push({ kind: head[1], name: head[2], doc: cleanDoc(doc), code: code.join("\n") });
    doc = [];
  }
  return found;
}

function cleanDoc(lines) {
  return lines
    .map((l) => l.replace(/^\s*\/\*\*\s?/, "").replace(/\s*\*\/\s*$/, "").replace(/^\s*\*\s?/, ""))
    .join("\n")
    .replace(/\{@link (\w+)\}/g, (_, name) => `[\`${name}\`](#${name.toLowerCase()})`)
    .trim();
}

export function render() {
  const parts = [
    "# JavaScript client: API reference",
    "",
    "[Documentation index](README.md) · [guide](javascript-client.md)",
    "",
    "Generated from the package's types (`packages/client/dist/*.d.ts`) by",
    "`packages/client/scripts/api-docs.mjs`; CI checks it is up to date. Edit the doc comments in",
    "`packages/client/src/`, then run `npm run build && npm run docs` there.",
    "",
  ];
  for (const [entry, file] of ENTRIES) {
    const items = declarations(readFileSync(path.join(root, file), "utf8"));
    parts.push(`## \`${entry}\``, "");
    parts.push(items.map((d) => `[\`${d.name}\`](#${d.name.toLowerCase()})`).join(" · "), "");
    for (const d of items) {
      parts.push(`### ${d.name}`, "");
      if (d.doc) parts.push(d.doc, "");
      parts.push("```ts", d.code, "```", "");
    }
  }
  return parts.join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const page = render();
  if (process.argv.includes("--check")) {
    const current = readFileSync(out, "utf8");
    if (current !== page) {
      console.error(`${path.relative(process.cwd(), out)} is out of date: run \`npm run build && npm run docs\` in packages/client`);
      process.exit(1);
    }
    console.log("api reference up to date");
  } else {
    writeFileSync(out, page);
    console.log(`wrote ${out}`);
  }
}
