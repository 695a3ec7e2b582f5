// What every browser test shares: a fake fleet (the fake-kube binary), a `vigil serve` on
// loopback watching it, and Debian's chromium driven by playwright-core. Nothing here opens a
// connection outside 127.0.0.0/8: the browser's every request is checked, and one to any
// other address fails the test.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const artifacts = path.join(root, 'target/browser-artifacts');
const vigilBin = process.env.VIGIL_BIN || path.join(root, 'target/debug/vigil');
const fakeKubeBin = process.env.FAKE_KUBE_BIN || path.join(root, 'target/debug/fake-kube');
const chromiumBin = process.env.CHROMIUM || '/usr/bin/chromium';
// Compiled plugins are cached across the tests (the first start compiles them).
const cacheDir = path.join(root, 'target/browser-tests-cache');

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` (sync or async) until it returns a truthy value, or fails after `timeout`. */
export async function until(what, check, timeout = 60000) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? ` (last error: ${last.message})` : ''}`);
    await sleep(200);
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function isLoopback(url) {
  const { protocol, hostname } = new URL(url);
  if (protocol === 'data:' || protocol === 'about:') return true;
  return hostname === 'localhost' || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** A child process whose output goes to a file of the test's work directory. */
function start(name, bin, args, env, work) {
  const out = fs.openSync(path.join(work, `${name}.log`), 'a');
  const child = spawn(bin, args, { env, stdio: ['ignore', out, out] });
  fs.closeSync(out);
  child.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return child;
}

/** The fake fleet: `clusters` fake Kubernetes API servers, their kubeconfigs in `work/kubeconfigs`. */
export async function startFleet(work, clusters, fixtures) {
  const kubeconfigs = path.join(work, 'kubeconfigs');
  fs.mkdirSync(kubeconfigs, { recursive: true });
  const control = `127.0.0.1:${await freePort()}`;
  const block = 100 + Math.floor(Math.random() * 100);
  const port = await freePort();
  const child = start('fake-kube', fakeKubeBin, ['--clusters', String(clusters), '--kubeconfig-dir', kubeconfigs,
    '--shape', 'embedded', '--address-block', String(block), '--port', String(port), '--control', control,
    ...(fixtures ? ['--fixtures', path.join(root, fixtures)] : [])],
  process.env, work);
  await until('fake-kube to be ready', () => fs.readFileSync(path.join(work, 'fake-kube.log'), 'utf8').includes('fake-kube ready'), 30000);
  const base = `http://${control}`;
  const call = async (method, p, body) => {
    const r = await fetch(`${base}${p}`, { method, body: body === undefined ? undefined : JSON.stringify(body) });
    if (!r.ok) throw new Error(`fake-kube ${method} ${p}: ${r.status}`);
  };
  return {
    kubeconfigs,
    refuse: (name) => call('PUT', `/clusters/${name}/fault`, { kind: 'refuse' }),
    restore: (name) => call('DELETE', `/clusters/${name}/fault`),
    refuseAll: () => call('PUT', '/fault', { fault: { kind: 'refuse' } }),
    stop: async () => { child.kill('SIGTERM'); await child.exited; },
  };
}

/**
 * `vigil serve` (target/debug/vigil) on a free loopback port with its SQLite file in `work`,
 * probing every second; `env` adds settings. `stop()` and `start()` restart it on the same
 * port and database.
 */
export async function startVigil(work, kubeconfigs, env = {}) {
  fs.mkdirSync(cacheDir, { recursive: true, mode: 0o700 });
  const home = path.join(work, 'home');
  fs.mkdirSync(home, { recursive: true });
  const listen = `127.0.0.1:${await freePort()}`;
  const base = `http://${listen}`;
  const settings = {
    PATH: process.env.PATH,
    HOME: home,
    KUBECONFIG_DIR: kubeconfigs,
    VIGIL_PLUGIN_DIR: path.join(work, 'plugins.d'),
    VIGIL_CACHE_DIR: cacheDir,
    DATABASE_URL: `sqlite://${path.join(work, 'vigil.db')}`,
    VIGIL_LISTEN: listen,
    CLUSTER_HEALTH_INTERVAL: '1',
    CLUSTER_HEALTH_TIMEOUT: '2',
    CLUSTER_HEALTH_FAILURE_THRESHOLD: '2',
    RUST_LOG: 'info',
    NO_COLOR: '1',
    ...env,
  };
  const token = settings.VIGIL_API_TOKEN;
  const vigil = {
    base,
    child: null,
    async start() {
      this.child = start('vigil', vigilBin, ['serve'], settings, work);
      const child = this.child;
      await until('vigil to answer /healthz', async () => {
        if (child.exitCode !== null) throw new Error(`vigil exited with ${child.exitCode} (see ${work}/vigil.log)`);
        // With read auth, even /healthz wants the token.
        return (await fetch(`${base}/healthz`, { headers: token ? { Authorization: `Bearer ${token}` } : {} })).ok;
      }, 60000);
    },
    async stop() {
      if (!this.child || this.child.exitCode !== null) return;
      this.child.kill('SIGTERM');
      const killer = setTimeout(() => this.child.kill('SIGKILL'), 15000);
      await this.child.exited;
      clearTimeout(killer);
    },
    /** A call to the API, with the token when one is set. */
    async api(method, p, body) {
      const headers = { Accept: 'application/json' };
      if (token) headers.Authorization = `Bearer ${token}`;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      const r = await fetch(`${base}${p}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await r.text();
      if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${text}`);
      return text ? JSON.parse(text) : null;
    },
    async clusters() {
      const all = [];
      let after = null;
      do {
        const page = await this.api('GET', `/api/v1/clusters?limit=1000${after ? `&after=${encodeURIComponent(after)}` : ''}`);
        all.push(...page.items);
        after = page.next;
      } while (after);
      return all;
    },
  };
  await vigil.start();
  return vigil;
}

/** Debian's chromium, headless, with everything that would call out turned off. */
export async function launchBrowser() {
  return chromium.launch({
    executablePath: chromiumBin,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--no-default-browser-check',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-domain-reliability', '--disable-client-side-phishing-detection', '--disable-breakpad',
      '--metrics-recording-only', '--disable-default-apps', '--disable-extensions',
      '--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication',
      '--no-pings', '--dns-prefetch-disable'],
  });
}

/**
 * A page in a fresh context. It records every request (URL and headers), console message,
 * page error and CSP violation; a request leaving 127.0.0.0/8 is aborted and recorded.
 */
export async function openPage(browser, { colorScheme = 'light' } = {}) {
  const context = await browser.newContext({ colorScheme, viewport: { width: 1280, height: 900 } });
  const record = { requests: [], outside: [], console: [], errors: [], violations: [] };
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (isLoopback(url)) return route.continue();
    record.outside.push(url);
    return route.abort();
  });
  const page = await context.newPage();
  page.on('request', (r) => record.requests.push({ url: r.url(), headers: r.headers() }));
  page.on('console', (m) => record.console.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => record.errors.push(String(e)));
  await page.exposeFunction('__vigilViolation', (v) => record.violations.push(v));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__vigilViolation(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  return { page, context, record };
}

/** A scratch directory for one test, removed by `cleanup` unless KEEP_WORK is set. */
export function workDir(name) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `vigil-browser-${name}-`));
}

export async function screenshot(page, name) {
  fs.mkdirSync(artifacts, { recursive: true });
  const file = path.join(artifacts, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/**
 * Runs `body({ fleet, vigil, browser, open, work })` with a fake fleet of `clusters` and a vigil
 * (settings in `env`), and stops everything after, keeping a screenshot of the last page
 * opened as `target/browser-artifacts/NAME.png` (also when the test failed).
 */
export async function scenario(name, { clusters = 50, env = {}, prepare, fixtures } = {}, body) {
  const work = workDir(name);
  const stops = [];
  let last = null;
  try {
    const fleet = await startFleet(work, clusters, fixtures);
    stops.push(() => fleet.stop());
    if (prepare) await prepare({ work, fleet });
    const vigil = await startVigil(work, fleet.kubeconfigs, typeof env === 'function' ? env(work) : env);
    stops.push(() => vigil.stop());
    const browser = await launchBrowser();
    stops.push(() => browser.close());
    const open = async (options) => {
      last = await openPage(browser, options);
      return last;
    };
    await body({ fleet, vigil, browser, open, work });
    for (const [label, list] of [['outside 127.0.0.0/8', last ? last.record.outside : []],
      ['page errors', last ? last.record.errors : []]]) {
      if (list.length) throw new Error(`${label}: ${list.join(', ')}`);
    }
  } finally {
    if (last) await screenshot(last.page, name).catch(() => {});
    for (const stop of stops.reverse()) await stop().catch(() => {});
    if (!process.env.KEEP_WORK) fs.rmSync(work, { recursive: true, force: true });
    else console.log(`kept ${work}`);
  }
}

/** Waits until every cluster of the API is ONLINE. */
export async function allOnline(vigil, count) {
  await until(`${count} clusters ONLINE`, async () => {
    const clusters = await vigil.clusters();
    return clusters.length === count && clusters.every((c) => c.status === 'ONLINE');
  }, 90000);
}

/** The text of the status cell of `name`'s row in the fleet table. */
export function rowStatus(page, name) {
  return page.locator(`#fleet tbody tr[data-cluster="${cssEscape(name)}"] .status`).textContent({ timeout: 2000 });
}

export function cssEscape(value) {
  return value.replace(/["\\]/g, '\\$&');
}
