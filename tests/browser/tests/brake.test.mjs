// Every cluster refuses at once: the mass-failure brake engages, the page shows its banner with
// the failures it suppressed, and no cluster turns OFFLINE (on the page or in the API).

import assert from 'node:assert/strict';
import test from 'node:test';
import { allOnline, scenario, screenshot, sleep } from '../lib/harness.mjs';

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
    // Several more intervals, well past the failure threshold.
    await sleep(8000);
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
