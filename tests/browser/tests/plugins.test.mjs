// The plugins view follows a live replacement: a kubeconfig-file.wasm dropped into the plugin
// directory overrides the built-in plugin as generation 2, on probation for its first probes
// (shown as they are judged), then active, its file as its source; without a reload.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import { allOnline, root, scenario, screenshot } from '../lib/harness.mjs';

// The first-party plugin as vigil's build script built it (scripts/browser-tests finds it).
const wasm = process.env.KUBECONFIG_FILE_WASM
  || path.join(root, 'target/guests/wasm32-wasip2/release/kubeconfig_file.wasm');
const manifest = path.join(root, 'plugins/kubeconfig-file/kubeconfig-file.toml');

test('a plugin replaced live: probation, then active', { timeout: 300000 }, async () => {
  assert.ok(fs.existsSync(wasm), `${wasm} is missing: building vigil (its build script) makes it; scripts/browser-tests finds it`);
  await scenario('plugins', {
    clusters: 5,
    env: (work) => {
      fs.mkdirSync(path.join(work, 'plugins.d'), { recursive: true, mode: 0o755 });
      return { VIGIL_PLUGIN_PROBATION_PROBES: '20' };
    },
  }, async ({ vigil, open, work }) => {
    await allOnline(vigil, 5);
    const { page } = await open();
    await page.goto(`${vigil.base}/#/plugins`);
    await page.waitForSelector('#plugins tr[data-plugin="kubeconfig-file"][data-state="active"]');
    assert.match(await page.locator('#plugins tr[data-plugin="kubeconfig-file"] td').nth(1).textContent(), /^1/);

    const dir = path.join(work, 'plugins.d');
    fs.copyFileSync(manifest, path.join(dir, 'kubeconfig-file.toml'));
    fs.copyFileSync(wasm, path.join(dir, '.kubeconfig-file.wasm.tmp'));
    fs.renameSync(path.join(dir, '.kubeconfig-file.wasm.tmp'), path.join(dir, 'kubeconfig-file.wasm'));

    const row = '#plugins tr[data-plugin="kubeconfig-file"]';
    await page.waitForSelector(`${row}[data-state="probation"]`, { timeout: 60000 });
    assert.match(await page.locator(`${row} td`).nth(1).textContent(), /^2 \(previous 1\)/);
    await page.waitForFunction((sel) => /[1-9]\d* of 20 probes judged, 0 inconclusive \(10 allowed\)/
      .test(document.querySelector(`${sel} .probation`).textContent), row);
    assert.equal(await page.locator(`${row} .probation progress`).getAttribute('max'), '20');
    await screenshot(page, 'plugins-probation');
    await page.waitForSelector(`${row}[data-state="active"]`, { timeout: 60000 });
    assert.match(await page.locator(`${row} td`).nth(1).textContent(), /^2/);
    assert.match(await page.locator(`${row} td`).nth(3).textContent(), /plugins\.d\/kubeconfig-file\.wasm$/);
  });
});
