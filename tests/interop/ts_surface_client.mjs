// What an MCP client sees of a server, as JSON, with the official TypeScript SDK client
// (npm @modelcontextprotocol/sdk): the same shape as surface_client.py, so
// tests/it/interop_surface.rs compares a direct connection with one through the bridge alike.
//
// Usage: node ts_surface_client.mjs surface TARGET
//        node ts_surface_client.mjs schema URL TOOL ARGS_JSON
//        node ts_surface_client.mjs updated URL URI TOOL
// TARGET: http://…/mcp, or "stdio:" followed by a JSON array [command, arg, …].
// The scenarios print "ok: …" lines and "all checks passed", or exit 1 after "FAIL: …".

import { createHash } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const WAIT_MS = 30_000;

function check(condition, message) {
  if (!condition) {
    console.log(`FAIL: ${message}`);
    process.exit(1);
  }
  console.log(`ok: ${message}`);
}

function transportFor(target) {
  if (target.startsWith("stdio:")) {
    const [command, ...args] = JSON.parse(target.slice("stdio:".length));
    return new StdioClientTransport({ command, args, stderr: "ignore" });
  }
  return new StreamableHTTPClientTransport(new URL(target));
}

async function connect(target) {
  const client = new Client({ name: "bridge-interop-ts", version: "1.0.0" });
  const transport = transportFor(target);
  await client.connect(transport);
  return { client, transport };
}

const byKey = (key) => (a, b) => (a[key] < b[key] ? -1 : a[key] > b[key] ? 1 : 0);

function digest(contents) {
  return contents.map((c) => {
    const item = { ...c };
    for (const key of ["text", "blob"]) {
      if (key in item) {
        const data = Buffer.from(item[key]);
        item[key] = { bytes: data.length, sha256: createHash("sha256").update(data).digest("hex") };
      }
    }
    return item;
  });
}

const errorOf = (e) => ({ error: e.code ?? e.name, message: e.message });

async function surface(target) {
  const { client } = await connect(target);
  const caps = client.getServerCapabilities() ?? {};
  const out = {
    capabilities: Object.keys(caps).filter((k) => caps[k] != null).sort(),
    resources_subscribe: Boolean(caps.resources?.subscribe),
  };
  const { tools } = await client.listTools();
  out.tools = tools.map((t) => ({ name: t.name, output_schema: t.outputSchema != null })).sort(byKey("name"));
  if (caps.resources) {
    const { resources } = await client.listResources();
    out.resources = [...resources].sort(byKey("uri"));
    out.reads = {};
    for (const r of resources.slice(0, 50)) {
      try {
        out.reads[r.uri] = digest((await client.readResource({ uri: r.uri })).contents);
      } catch (e) {
        out.reads[r.uri] = errorOf(e);
      }
    }
    const { resourceTemplates } = await client.listResourceTemplates();
    out.templates = [...resourceTemplates].sort(byKey("uriTemplate"));
  }
  if (caps.prompts) {
    const { prompts } = await client.listPrompts();
    out.prompts = [...prompts].sort(byKey("name"));
    out.prompt_gets = {};
    for (const p of prompts) {
      const args = Object.fromEntries((p.arguments ?? []).filter((a) => a.required).map((a) => [a.name, "1"]));
      try {
        out.prompt_gets[p.name] = await client.getPrompt({ name: p.name, arguments: args });
      } catch (e) {
        out.prompt_gets[p.name] = errorOf(e);
      }
    }
  }
  if (caps.completions) {
    out.completions = {};
    for (const p of out.prompts ?? []) {
      for (const a of p.arguments ?? []) {
        try {
          const r = await client.complete({ ref: { type: "ref/prompt", name: p.name }, argument: { name: a.name, value: "" } });
          out.completions[`prompt ${p.name} ${a.name}`] = r.completion.values;
        } catch (e) {
          out.completions[`prompt ${p.name} ${a.name}`] = errorOf(e);
        }
      }
    }
    for (const t of out.templates ?? []) {
      for (const [, name] of t.uriTemplate.matchAll(/\{[+#./;?&]?([A-Za-z0-9_]+)/g)) {
        try {
          const r = await client.complete({ ref: { type: "ref/resource", uri: t.uriTemplate }, argument: { name, value: "" } });
          out.completions[`template ${t.uriTemplate} ${name}`] = r.completion.values;
        } catch (e) {
          out.completions[`template ${t.uriTemplate} ${name}`] = errorOf(e);
        }
      }
    }
  }
  await client.close();
  console.log(JSON.stringify(out, null, 1));
}

async function schema(url, tool, args) {
  const { client } = await connect(url);
  const { tools } = await client.listTools();
  check(tools.find((t) => t.name === tool)?.outputSchema != null, `${tool} is listed with its output schema`);
  try {
    await client.callTool({ name: tool, arguments: args, _meta: { "mcp-progress-bridge/mode": "async" } });
    check(false, "a job handle was asked for a tool with an output schema");
  } catch (e) {
    check(/output schema/.test(e.message) && /sync/.test(e.message), `mode async is refused with what to do: ${e.message}`);
  }
  const result = await client.callTool({ name: tool, arguments: args });
  check(!result.isError && result.structuredContent != null, `a plain call validates against the schema: ${JSON.stringify(result.structuredContent)}`);
  await client.close();
}

async function updated(url, uri, tool) {
  const { client } = await connect(url);
  const seen = new Promise((resolve) => {
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      if (n.params.uri === uri) resolve(n.params.uri);
    });
  });
  await client.subscribeResource({ uri });
  await client.callTool({ name: tool, arguments: {} });
  const got = await Promise.race([seen, new Promise((_, reject) => setTimeout(() => reject(new Error("no resources/updated")), WAIT_MS))]);
  check(got === uri, `resources/updated for ${uri}`);
  await client.unsubscribeResource({ uri });
  await client.close();
}

const [scenario, target, ...rest] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log("FAIL: timed out");
  process.exit(1);
}, 120_000);
try {
  if (scenario === "surface") await surface(target);
  else if (scenario === "schema") await schema(target, rest[0], JSON.parse(rest[1]));
  else if (scenario === "updated") await updated(target, rest[0], rest[1]);
  else check(false, `unknown scenario ${scenario}`);
  if (scenario !== "surface") console.log("all checks passed");
} catch (e) {
  console.log(`FAIL: ${e.stack ?? e}`);
  process.exit(1);
}
clearTimeout(timer);
process.exit(0);
