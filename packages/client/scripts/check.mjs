// CI's check of the package (`npm run check`, after `npm ci`): the committed build (dist/, which
// the bridge serves at /client.js) is what src/ compiles to, the version is the bridge's, the
// packed tarball holds what the exports map names and stays within its size budget, and the API
// reference is up to date. Prints one line per check; exits 1 on the first that fails.

import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

import { render } from "./api-docs.mjs";

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const repo = path.join(root, "..", "..");
/** The tarball's budget, and the gzipped module a page without a bundler loads. */
const PACKED_BYTES_MAX = 40_000;
const CLIENT_GZIP_BYTES_MAX = 16_000;
const EXPECTED_FILES = [
  "README.md",
  "dist/index.d.ts",
  "dist/index.js",
  "dist/react.d.ts",
  "dist/react.js",
  "package.json",
  "styles/job-progress.css",
];

function check(what, ok, detail = "") {
  console.log(`${ok ? "ok" : "not ok"} - ${what}${detail ? `: ${detail}` : ""}`);
  if (!ok) process.exit(1);
}

const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));

// 1. dist/ is the build of src/.
const fresh = mkdtempSync(path.join(tmpdir(), "client-build-"));
try {
  execFileSync(path.join(root, "node_modules", ".bin", "tsc"), ["-p", path.join(root, "tsconfig.json"), "--outDir", fresh], { stdio: "inherit" });
  const stale = readdirSync(fresh).filter((f) => readFileSync(path.join(fresh, f), "utf8") !== readFileSync(path.join(root, "dist", f), "utf8"));
  const extra = readdirSync(path.join(root, "dist")).filter((f) => !readdirSync(fresh).includes(f));
  check("dist/ is the build of src/ (run `npm run build` and commit dist/)", stale.length === 0 && extra.length === 0, [...stale, ...extra].join(", "));
} finally {
  rmSync(fresh, { recursive: true, force: true });
}

// 2. The bridge's version.
const cargo = readFileSync(path.join(repo, "Cargo.toml"), "utf8");
const bridgeVersion = /^\[package\][^[]*?^version\s*=\s*"([^"]+)"/ms.exec(cargo)?.[1];
check("package.json's version is the bridge's (Cargo.toml)", pkg.version === bridgeVersion, `${pkg.version} vs ${bridgeVersion}`);
const served = readFileSync(path.join(root, "dist", "index.js"), "utf8");
check("VERSION in the module is the package's", served.includes(`export const VERSION = "${pkg.version}";`));

// 3. No runtime dependencies; React only as an optional peer.
check("no runtime dependencies", !pkg.dependencies || Object.keys(pkg.dependencies).length === 0);
check("React is an optional peer dependency", pkg.peerDependencies?.react && pkg.peerDependenciesMeta?.react?.optional === true);

// 4. What `npm pack` would publish.
const [packed] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--loglevel=error"], { cwd: root, encoding: "utf8" }));
const files = packed.files.map((f) => f.path).sort();
check("the tarball holds exactly the built files, types, styles and README", JSON.stringify(files) === JSON.stringify(EXPECTED_FILES), files.join(", "));
for (const [subpath, target] of Object.entries(pkg.exports)) {
  const targets = typeof target === "string" ? [target] : Object.values(target);
  for (const t of targets) check(`exports["${subpath}"] -> ${t} is in the tarball`, files.includes(t.replace(/^\.\//, "")));
  if (typeof target === "object") {
    check(`exports["${subpath}"] has types first`, Object.keys(target)[0] === "types");
  }
}
check(`packed size within ${PACKED_BYTES_MAX} bytes`, packed.size <= PACKED_BYTES_MAX, `${packed.size} bytes packed, ${packed.unpackedSize} unpacked`);
const gz = gzipSync(served).length;
check(`dist/index.js (served at /client.js) within ${CLIENT_GZIP_BYTES_MAX} bytes gzipped`, gz <= CLIENT_GZIP_BYTES_MAX, `${served.length} bytes, ${gz} gzipped`);

// 5. The module imports nothing (it is served alone at /client.js); react.js only React and it.
check("dist/index.js imports nothing", !/^(import|export .* from)\s/m.test(served) && !/\bimport\(/.test(served));
const reactImports = [...readFileSync(path.join(root, "dist", "react.js"), "utf8").matchAll(/from\s+"([^"]+)"/g)].map((m) => m[1]);
check("dist/react.js imports only React and ./index.js", reactImports.every((m) => ["react", "react/jsx-runtime", "./index.js"].includes(m)), reactImports.join(", "));

// 6. The API reference is generated from these types.
const page = readFileSync(path.join(repo, "docs", "javascript-client-api.md"), "utf8");
check("docs/javascript-client-api.md is up to date (npm run docs)", page === render());
console.log(`${packed.name}@${packed.version}: ${packed.entryCount} files, ${packed.size} bytes packed, ${packed.unpackedSize} unpacked; /client.js ${gz} bytes gzipped`);
