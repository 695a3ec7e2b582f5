// js-version-probe: a vigil probe plugin written in JavaScript.
//
// It reads the context the cluster's kubeconfig reference selects (credentials.context),
// sends `GET {server}/version` with the context's TLS material and token (http.send), and
// reports the cluster healthy with the server's version. Built into a WebAssembly
// component for the `probe` world of wit/since_v0.1.0 by componentize-js (package.json's
// `build` script).

import { context, readFile } from 'vigil:plugin/credentials@0.1.0';
import { send } from 'vigil:plugin/http@0.1.0';
import { enabled, write } from 'vigil:plugin/log@0.1.0';

const NAME = 'js-version-probe';
const VERSION = '0.1.0';

// The largest message vigil accepts is one line of 1,024 bytes.
const MAX_MESSAGE = 300;

export const prober = {
  info() {
    return {
      name: NAME,
      version: VERSION,
      schemes: ['file'],
      description: "GETs /version on a kubeconfig context's API server (JavaScript)",
    };
  },

  // Only kubeconfig files: a file reference is an absolute path (`/path/kubeconfig#context`).
  accepts(cluster) {
    return cluster.reference.startsWith('/');
  },

  probe(request) {
    const cluster = request.cluster;
    const ctx = credential(() => context());

    // A `server` parameter names the API server to ask instead of the kubeconfig's (one
    // replica behind a load balancer, say). vigil lets the request go there only if the
    // plugin's grants allow that host, and sends the context's credentials only to the
    // kubeconfig's own server.
    const server = parameter(cluster, 'server') ?? ctx.server;
    let url;
    try {
      url = new URL('/version', server).href;
    } catch {
      throw notProbeable('reference-broken', 'the API server address is not a URL');
    }

    const headers = [['Accept', 'application/json']];
    if (ctx.token !== undefined) {
      const token = new TextDecoder().decode(material(ctx.token)).trim();
      headers.push(['Authorization', `Bearer ${token}`]);
    }
    const tls = {
      caPem: optionalMaterial(ctx.certificateAuthority),
      clientCertificatePem: optionalMaterial(ctx.clientCertificate),
      clientKeyPem: optionalMaterial(ctx.clientKey),
      serverName: ctx.tlsServerName,
      insecureSkipVerify: ctx.insecureSkipTlsVerify,
    };

    let response;
    try {
      response = send({ method: 'GET', url, headers, body: undefined, tls, timeoutMs: undefined });
    } catch (error) {
      return httpFailure(payload(error));
    }
    return verdictOf(response);
  },
};

// The report for an answer from the API server.
function verdictOf(response) {
  const latencyMs = response.latencyMs;
  const status = response.status;
  if (status === 401 || status === 403) {
    return report('credentials-rejected', undefined, `GET /version: status ${status}`, latencyMs);
  }
  if (status >= 500) {
    return report('unhealthy', 'server-error', `GET /version: status ${status}`, latencyMs);
  }
  if (status !== 200) {
    return report('unhealthy', 'bad-response', `GET /version: status ${status}`, latencyMs);
  }
  let version;
  try {
    version = JSON.parse(new TextDecoder().decode(response.body)).gitVersion;
  } catch {
    version = undefined;
  }
  if (typeof version !== 'string' || version === '') {
    return report('unhealthy', 'bad-response', 'GET /version: no gitVersion in the answer', latencyMs);
  }
  // vigil's log shows it at debug level, tagged with the plugin and the cluster.
  if (enabled('debug')) {
    write('debug', `server version ${short(version)}`);
  }
  return {
    ...report('healthy', undefined, `server ${short(version)}`, latencyMs),
    serverVersion: short(version),
  };
}

function report(verdict, reason, message, latencyMs) {
  return { verdict, reason, message, latencyMs, serverVersion: undefined, details: [] };
}

// A failed `http.send`. The host tells whose fault it was: `unhealthy` is believed only if
// the request reached the cluster; a denied request is the plugin's grant, never the
// cluster's.
function httpFailure(error) {
  switch (error.tag) {
    case 'denied':
      throw inconclusive('denied', `request denied: ${short(error.val)}`);
    case 'timeout':
      return report('unhealthy', 'timeout', 'GET /version: no answer in time', 0);
    case 'refused':
      return report('unhealthy', 'refused', `GET /version: ${short(error.val)}`, 0);
    case 'tls':
      return report('unhealthy', 'tls', `GET /version: ${short(error.val)}`, 0);
    case 'dns':
      return report('unhealthy', 'dns', `GET /version: ${short(error.val)}`, 0);
    case 'too-large':
      return report('unhealthy', 'bad-response', 'GET /version: the answer is too large', 0);
    default:
      return report('unhealthy', 'bad-response', `GET /version: ${short(error.val ?? error.tag)}`, 0);
  }
}

// Calls a `credentials` function; a refusal ends the probe with the outcome it means.
function credential(call) {
  try {
    return call();
  } catch (error) {
    const refusal = payload(error);
    const message = short(refusal.val ?? String(refusal));
    switch (refusal.tag) {
      case 'denied':
        throw inconclusive('denied', `credentials denied: ${message}`);
      case 'exec-credentials':
        throw notProbeable('exec-credentials', message);
      default:
        throw notProbeable('reference-broken', message);
    }
  }
}

// The bytes of a piece of the context's credentials: inline, or a file it names (read at
// every probe: rotated certificates and projected tokens change on disk).
function material(piece) {
  return piece.tag === 'data' ? piece.val : credential(() => readFile(piece.val));
}

function optionalMaterial(piece) {
  return piece === undefined ? undefined : material(piece);
}

// A plain parameter of the cluster, or undefined.
function parameter(cluster, name) {
  const found = cluster.parameters.find(([key]) => key === name);
  return found === undefined ? undefined : found[1];
}

// The `probe-error` cases: thrown, they become the `err` of `probe`'s result.
function notProbeable(cls, message) {
  return { tag: 'not-probeable', val: { class: cls, message: short(message) } };
}

function inconclusive(cls, message) {
  return { tag: 'inconclusive', val: { class: cls, message: short(message) } };
}

// The error value of a host call that returned `err` (thrown by the bindings).
function payload(error) {
  return error !== null && typeof error === 'object' && 'payload' in error ? error.payload : error;
}

// One line, bounded: vigil refuses a longer message.
function short(text) {
  const line = String(text).replace(/[\r\n\t]+/g, ' ');
  return line.length > MAX_MESSAGE ? `${line.slice(0, MAX_MESSAGE)}…` : line;
}
