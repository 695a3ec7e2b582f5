// 50 fake clusters: the page lists them; one is made to refuse connections and, without a
// reload, its row turns OFFLINE with the reason, its app shows DEGRADED and the timeline
// gains the outage; it comes back and the app is DEPLOYED again.

import assert from 'node:assert/strict';
import test from 'node:test';
import { allOnline, scenario, screenshot, until } from '../lib/harness.mjs';

const victim = 'cluster-00002';
const row = (name) => `#fleet tbody tr[data-cluster="${name}"]`;

test('an outage and its recovery show live', { timeout: 300000 }, async () => {
  await scenario('live', { clusters: 50 }, async ({ fleet, vigil, open }) => {
    await allOnline(vigil, 50);
    await vigil.api('POST', '/api/v1/apps', { name: 'shop', cluster: victim });
    await vigil.api('POST', '/api/v1/deployments', { app: 'shop', version: '1.0.0' });
    await vigil.api('PATCH', `/api/v1/clusters/${victim}`, { labels: { team: 'shop' } });

    const { page, record } = await open();
    await page.goto(`${vigil.base}/`);
    await page.waitForSelector('#fleet[data-rows-rendered]');
    await page.waitForSelector('#connection[data-state="live"]');
    assert.equal(await page.locator('#fleet tbody tr[data-cluster]').count(), 50);
    assert.equal(await page.locator('[data-count="ONLINE"] strong').textContent(), '50');
    assert.equal((await page.locator(`${row(victim)} .status`).textContent()), 'ONLINE');
    await page.evaluate(() => { window.__sameDocument = true; });
    await screenshot(page, 'live-fleet');

    await fleet.refuse(victim);
    await page.waitForSelector(`${row(victim)}[data-status="OFFLINE"]`, { timeout: 60000 });
    assert.equal(await page.locator(`${row(victim)} .status`).textContent(), 'OFFLINE');
    assert.match(await page.locator(`${row(victim)} .reason`).textContent(), /refused/);
    assert.equal(await page.locator('[data-count="OFFLINE"] strong').textContent(), '1');
    // The counts per label (from /api/v1/summary) follow.
    const group = page.locator('#label-groups tr[data-label="team=shop"] td');
    await until('the label group to count the outage', async () => (await group.nth(2).textContent()) === '1', 10000);
    await screenshot(page, 'live-offline');

    // Filters and sorting, from the keyboard's controls.
    await page.selectOption('#f-status', 'OFFLINE');
    assert.deepEqual(await page.locator('#fleet tbody tr[data-cluster]').evaluateAll((rows) => rows.map((r) => r.dataset.cluster)), [victim]);
    await page.selectOption('#f-status', '');
    await page.fill('#f-label', 'team=shop');
    assert.equal(await page.locator('#fleet tbody tr[data-cluster]').count(), 1);
    await page.fill('#f-label', '');
    await page.fill('#f-text', 'cluster-0004');
    assert.equal(await page.locator('#fleet tbody tr[data-cluster]').count(), 10);
    await page.fill('#f-text', '');
    await page.click('button[data-sort="status"]');
    assert.equal(await page.locator('#fleet tbody tr[data-cluster]').first().getAttribute('data-cluster'), victim);
    assert.equal(await page.locator('th[data-key="status"]').getAttribute('aria-sort'), 'ascending');
    await page.click('button[data-sort="name"]');
    assert.equal(await page.locator('#fleet tbody tr[data-cluster]').first().getAttribute('data-cluster'), 'cluster-00000');

    // The cluster view, reached by its link (keyboard: focus and Enter).
    await page.locator(`${row(victim)} a`).focus();
    await page.keyboard.press('Enter');
    await page.waitForSelector('#apps tr[data-app="shop"]');
    assert.equal(await page.locator('#apps tr[data-app="shop"] .status').textContent(), 'DEGRADED');
    await page.waitForSelector('#outages tr[data-open="true"]');
    assert.match(await page.locator('#timeline').textContent(), /ONLINE → OFFLINE/);
    // Uptime and latency, as text and as small charts.
    assert.match(await page.locator('#uptime figcaption').textContent(), /24h: \d+\.\d+ %/);
    assert.match(await page.locator('#latency figcaption').textContent(), /latest \d+ ms/);
    assert.equal(await page.locator('#latency svg polyline').count(), 1);
    await screenshot(page, 'live-cluster-outage');

    await fleet.restore(victim);
    await page.waitForSelector('#apps tr[data-app="shop"] [data-status="DEPLOYED"]', { timeout: 60000 });
    await page.waitForSelector('#outages tr[data-open="false"]');
    assert.match(await page.locator('#outages tr[data-open="false"] td:nth-of-type(3)').textContent(), /\d+ s/);
    assert.match(await page.locator('#timeline').textContent(), /OFFLINE → ONLINE/);
    assert.match(await page.locator('#timeline').textContent(), /shop restored/);
    // The closed outage names the app it degraded and the one its recovery restored.
    const closed = page.locator('#outages tr[data-open="false"]');
    assert.equal(await closed.locator('td:nth-of-type(4)').textContent(), 'shop');
    assert.equal(await closed.locator('td:nth-of-type(5)').textContent(), 'shop');

    // Back to the fleet: the row is ONLINE again; all of it without a reload.
    await page.goBack();
    await page.waitForSelector(`${row(victim)}[data-status="ONLINE"]`);
    assert.equal(await page.evaluate(() => window.__sameDocument), true);
    const documents = record.requests.filter((r) => new URL(r.url).pathname === '/');
    assert.equal(documents.length, 1, 'the page was loaded once');
    const api = (await vigil.api('GET', '/api/v1/apps/shop'));
    assert.equal(api.status, 'DEPLOYED');
  });
});
