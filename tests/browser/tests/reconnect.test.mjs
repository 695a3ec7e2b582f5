// The event stream is cut by a restart of vigil: the page shows "disconnected" while it is down,
// then reconnects with Last-Event-ID and shows the transitions it missed meanwhile (the
// browser's reconnection is held back until vigil has confirmed an outage).

import assert from 'node:assert/strict';
import test from 'node:test';
import { allOnline, scenario, screenshot, until } from '../lib/harness.mjs';

const victim = 'cluster-00003';

test('a cut stream shows disconnected and catches up', { timeout: 300000 }, async () => {
  await scenario('reconnect', { clusters: 50 }, async ({ fleet, vigil, open }) => {
    await allOnline(vigil, 50);
    const { page, record } = await open();
    await page.goto(`${vigil.base}/`);
    await page.waitForSelector('#fleet[data-rows-rendered]');
    await page.waitForSelector('#connection[data-state="live"]');
    // One event seen, so the page knows where the stream stood.
    await vigil.api('PATCH', '/api/v1/clusters/cluster-00001', { labels: { zone: 'a' } });
    await page.waitForSelector('#recent li[data-kind="cluster-updated"]');

    let hold = true;
    await page.route('**/api/v1/events*', (route) => (hold ? route.abort() : route.continue()));
    await vigil.stop();
    await page.waitForSelector('#connection[data-state="down"]', { timeout: 30000 });
    assert.match(await page.locator('#connection').textContent(), /Disconnected/);
    await screenshot(page, 'reconnect-down');

    await fleet.refuse(victim);
    await vigil.start();
    await until(`${victim} OFFLINE in the API`, async () =>
      (await vigil.api('GET', `/api/v1/clusters/${victim}`)).status === 'OFFLINE', 60000);
    assert.equal(await page.locator('#connection').getAttribute('data-state'), 'down');
    const before = record.requests.length;
    hold = false;

    await page.waitForSelector('#connection[data-state="live"]', { timeout: 30000 });
    await page.waitForSelector(`#fleet tbody tr[data-cluster="${victim}"][data-status="OFFLINE"]`);
    // The missed transition arrives as an event of the stream, not only in the lists read again.
    await page.waitForFunction((name) => [...document.querySelectorAll('#recent li[data-kind="status-changed"]')]
      .some((li) => li.textContent.includes(name) && li.textContent.includes('ONLINE → OFFLINE')), victim);
    const resumed = record.requests.slice(before).find((r) => new URL(r.url).pathname === '/api/v1/events');
    assert.ok(resumed, 'the page reconnected');
    assert.match(resumed.headers['last-event-id'] || '', /^\d+$/);
    await screenshot(page, 'reconnect-caught-up');
  });
});
