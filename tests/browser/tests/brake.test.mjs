// Every cluster refuses at once: the mass-failure brake engages, the page shows its banner with
// the failures it suppressed, and no cluster turns OFFLINE (on the page or in the API).

import assert from 'node:assert/strict';
import test from 'node:test';
import { allOnline, scenario, screenshot, until } from '../lib/harness.mjs';

// CLUSTER_HEALTH_FAILURE_THRESHOLD as the harness sets it.
const THRESHOLD = 2;

/** How many of `name`'s failures the brake kept from counting, per its history. */
async function suppressed(vigil, name) {
  const history = await vigil.api('GET', `/api/v1/clusters/${encodeURIComponent(name)}/history?limit=200`);
  return history.items.filter((e) => e.kind === 'failure-not-counted' && e.detail && e.detail.why === 'brake').length;
}

test('a mass failure shows the brake banner and nothing goes OFFLINE', { timeout: 300000 }, async () => {
  await scenario('brake', { clusters: 50, env: { CLUSTER_HEALTH_INTERVAL: '2' } }, async ({ fleet, vigil, open }) => {
    await allOnline(vigil, 50);
    const { page } = await open();
    await page.goto(`${vigil.base}/`);
    await page.waitForSelector('#fleet[data-rows-rendered]');
    await page.waitForSelector('#connection[data-state="live"]');
    assert.equal(await page.locator('#brake').isVisible(), false);

    await fleet.refuseAll();
    await page.waitForSelector('#brake:not([hidden])', { timeout: 60000 });
    assert.match(await page.locator('#brake h2').textContent(), /brake holds/);
    await page.waitForFunction(() => document.querySelectorAll('#brake .suppressed li').length >= 10);
    assert.match(await page.locator('#brake').textContent(), /refused/);
    // Well past the failure threshold: every cluster failed once more than it takes to go
    // OFFLINE, each failure held back by the brake.
    await until(`every cluster has ${THRESHOLD + 1} failures not counted (brake)`, async () => {
      for (const cluster of await vigil.clusters()) {
        if (await suppressed(vigil, cluster.name) < THRESHOLD + 1) return false;
      }
      return true;
    }, 90000);
    assert.equal(await page.locator('[data-count="OFFLINE"] strong').textContent(), '0');
    assert.equal(await page.locator('#fleet tbody tr[data-status="OFFLINE"]').count(), 0);
    const offline = (await vigil.clusters()).filter((c) => c.status === 'OFFLINE');
    assert.deepEqual(offline.map((c) => c.name), []);
    const ready = await (await fetch(`${vigil.base}/readyz`)).json();
    assert.equal(ready.brake_holding, true);
    await screenshot(page, 'brake-banner');

    // A new page learns that the brake holds from /readyz.
    await page.reload();
    await page.waitForSelector('#brake:not([hidden])');
  });
});
