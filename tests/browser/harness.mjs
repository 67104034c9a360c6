// What the frontend-kit browser tests share: Chromium (Debian's, through playwright-core; no
// browser is downloaded), numbered steps with "ok"/"not ok" lines and the closing count, child
// processes (the bridge, the example's backend) started and waited for by their banner line,
// and a TCP proxy that sends each connection to the first of its targets that accepts it (a
// load balancer in front of replicas).

import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";

import { chromium } from "playwright-core";

export const STEP_TIMEOUT = 30_000;

export async function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
}

let passed = 0;
let failed = 0;
const cleanups = [];

/** Run one named step; a failure is reported and counted, and the next step runs. */
export async function step(name, body) {
  const started = Date.now();
  try {
    await body();
    passed += 1;
    console.log(`ok - ${name} (${Date.now() - started} ms)`);
  } catch (error) {
    failed += 1;
    console.log(`not ok - ${name}\n  ${String(error?.stack ?? error).split("\n").join("\n  ")}`);
  }
}

export function assert(condition, message) {
  if (!condition) throw new Error(message);
}

export const sameList = (a, b) => JSON.stringify(a) === JSON.stringify(b);
export const range = (n) => Array.from({ length: n }, (_, i) => i + 1);

/** Stop what was started (last first), print the count, exit 1 if a step failed. */
export async function finish() {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

/** Wait (bounded) until `check()` resolves truthy. */
export async function until(check, what, timeoutMs = STEP_TIMEOUT) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A TCP port nothing listens on right now. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Start a child process and wait for a line of its stdout that matches `banner` (its address);
 * its output is kept for the report. Resolves to {child, match, output(), stop()}.
 */
export function startProcess(command, args, { env = {}, banner, name, cwd } = {}) {
  // A variable set to undefined is taken out of the child's environment.
  const merged = Object.fromEntries(Object.entries({ ...process.env, ...env }).filter(([, v]) => v !== undefined));
  const child = spawn(command, args, { cwd, env: merged, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const collect = (chunk) => {
    output += chunk;
  };
  child.stderr.on("data", collect);
  const stop = (signal = "SIGTERM") =>
    new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once("exit", () => resolve());
      child.kill(signal);
      setTimeout(() => child.kill("SIGKILL"), 15_000).unref();
    });
  cleanups.push(() => stop("SIGKILL"));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} printed no ${banner} within 30 s:\n${output}`)), 30_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before it was ready:\n${output}`));
    });
    child.stdout.on("data", (chunk) => {
      output += chunk;
      const match = banner.exec(output);
      if (match) {
        clearTimeout(timer);
        child.removeAllListeners("exit");
        resolve({ child, match, output: () => output, stop });
      }
    });
  });
}

/**
 * The bridge binary (BRIDGE_BIN) on `config` (a TOML text, the [server] listen and public_url
 * included), ready when `/readyz` answers 200. Resolves to {base, stop(signal), output()}.
 */
export async function startBridge(config, name = "bridge") {
  const bin = process.env.BRIDGE_BIN;
  assert(bin, "BRIDGE_BIN is not set (tests/it/web.rs sets it)");
  const dir = mkdtempSync(path.join(tmpdir(), "kit-bridge-"));
  const file = path.join(dir, `${name}.toml`);
  writeFileSync(file, config);
  // The file is all of its configuration: the variables that override it are taken out.
  const env = { RUST_LOG: "info,rmcp=warn", BRIDGE_LISTEN: undefined, BRIDGE_PUBLIC_URL: undefined, BRIDGE_REDIS_URL: undefined, BRIDGE_MCP_TOKEN: undefined };
  const started = await startProcess(bin, ["--config", file], {
    env,
    banner: /listening on (http:\/\/[\d.:]+)/,
    name,
  });
  const base = started.match[1];
  await until(async () => (await fetch(`${base}/readyz`).catch(() => null))?.status === 200, `${name} ready`);
  return { base, stop: started.stop, output: started.output, pid: started.child.pid };
}

/** The demo tools as the bridge's stdio upstream. */
export function demoUpstream() {
  return `[[upstreams]]\nname = "demo"\ntransport = "stdio"\ncommand = "${process.env.BRIDGE_BIN}"\nargs = ["demo-tools"]\n`;
}

/**
 * A TCP proxy on 127.0.0.1:`port` that sends each new connection to the first target (a port)
 * that accepts it: a load balancer with health by connection. Resolves to {close(), routed}
 * (`routed`: the target port of each connection, in order).
 */
export function failoverProxy(port, targets) {
  const routed = [];
  const sockets = new Set();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.pause();
    const attempt = (i) => {
      if (i >= targets.length) return client.destroy();
      const upstream = net.connect(targets[i], "127.0.0.1");
      upstream.once("error", () => {
        if (!upstream.connected) attempt(i + 1);
      });
      upstream.once("connect", () => {
        routed.push(targets[i]);
        sockets.add(upstream);
        upstream.on("close", () => {
          sockets.delete(upstream);
          client.destroy();
        });
        upstream.on("error", () => client.destroy());
        client.on("error", () => upstream.destroy());
        client.on("close", () => upstream.destroy());
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
    };
    attempt(0);
  });
  return new Promise((resolve) => {
    server.listen(port, "127.0.0.1", () => {
      const close = () =>
        new Promise((done) => {
          for (const s of sockets) s.destroy();
          server.close(() => done());
        });
      cleanups.push(close);
      resolve({ close, routed });
    });
  });
}

/** A console watcher: page errors other than the network errors a cut connection causes. */
export function pageErrors(page) {
  const errors = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error" && !/net::|Failed to load resource|EventSource|503|404/.test(message.text())) {
      errors.push(message.text());
    }
  });
  return errors;
}
