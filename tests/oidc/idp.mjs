// A real OpenID Connect provider (oidc-provider, OpenID certified) for the bridge's auth tests.
//
// Usage: node idp.mjs   — listens on a free 127.0.0.1 port and prints one JSON line:
//   {"issuer":"http://127.0.0.1:PORT","token_endpoint":"...","jwks_uri":"..."}
//
// Clients (client_credentials, client_secret_basic or _post; secret = "<id>-secret"), each
// with JWT access tokens for the resource it asks for (RFC 8707 `resource`; the `aud`):
//   team-a, team-b      plain callers
//   admin               roles: ["Bridge.Admin"]
//   research            roles: ["Research"]
//   short-lived         tokens that live 1 second
// The subject (`sub`) of a client_credentials token is the client ID, as a managed identity's
// is its object ID.
//
// Test-only routes (the provider does not mint these tokens, so the test asks the key holder):
//   POST /_test/sign    {"claims": {...}, "header": {...}}: signs with the current key (RS256)
//   POST /_test/rotate  a new signing key (new kid) first in the JWKS, the old one kept: the
//                       provider signs with the new one from now on
//   GET  /_test/stats   {"jwks_requests": N}: how often the JWKS was fetched
import http from 'node:http';
import { randomUUID } from 'node:crypto';

import { exportJWK, generateKeyPair, importJWK, SignJWT } from 'jose';
import Provider from 'oidc-provider';

const CLIENTS = ['team-a', 'team-b', 'admin', 'research', 'short-lived'];
const ROLES = { admin: ['Bridge.Admin'], research: ['Research'] };

async function newKey() {
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const jwk = await exportJWK(privateKey);
  return { ...jwk, kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

function makeProvider(issuer, keys) {
  const provider = new Provider(issuer, {
    clients: CLIENTS.map((id) => ({
      client_id: id,
      client_secret: `${id}-secret`,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic',
    })),
    clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
    jwks: { keys },
    scopes: ['mcp'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resource, client) => ({
          scope: 'mcp',
          audience: resource,
          accessTokenTTL: client.clientId === 'short-lived' ? 1 : 600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    extraTokenClaims: (ctx, token) => {
      const roles = ROLES[token.clientId];
      return roles ? { roles } : undefined;
    },
  });
  provider.on('server_error', (ctx, error) => console.error('server_error', error));
  return provider;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

const keys = [await newKey()];
let provider;
let handler;
let jwksRequests = 0;

const server = http.createServer(async (req, res) => {
  const path = new URL(req.url, 'http://x').pathname;
  const json = (status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  try {
    if (path === '/_test/sign' && req.method === 'POST') {
      const { claims, header } = JSON.parse(await readBody(req));
      const key = await importJWK(keys[0], 'RS256');
      const token = await new SignJWT(claims)
        .setProtectedHeader({ alg: 'RS256', kid: keys[0].kid, typ: 'at+jwt', ...header })
        .sign(key);
      return json(200, { token });
    }
    if (path === '/_test/rotate' && req.method === 'POST') {
      keys.unshift(await newKey());
      provider = makeProvider(provider.issuer, keys);
      handler = provider.callback();
      return json(200, { kid: keys[0].kid });
    }
    if (path === '/_test/stats') {
      return json(200, { jwks_requests: jwksRequests });
    }
    if (path === '/jwks') jwksRequests += 1;
    return handler(req, res);
  } catch (error) {
    console.error(error);
    return json(500, { error: String(error) });
  }
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  provider = makeProvider(issuer, keys);
  handler = provider.callback();
  console.log(JSON.stringify({
    issuer,
    token_endpoint: `${issuer}/token`,
    jwks_uri: `${issuer}/jwks`,
  }));
});

// The test stops it by closing stdin (or killing it): no orphan outlives the test.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
