// With read auth on, the page asks for a token, keeps it in this tab's session storage only,
// and sends it as a header: no URL the browser requests ever holds it, the event stream
// included. A wrong token is refused and the form comes back.

import assert from 'node:assert/strict';
import test from 'node:test';
import { allOnline, scenario, screenshot } from '../lib/harness.mjs';

const token = `browser-test-token-${Math.random().toString(36).slice(2)}`;

test('read auth: a token from the form, in headers only', { timeout: 300000 }, async () => {
  await scenario('auth', {
    clusters: 5,
    env: { VIGIL_API_TOKEN: token, VIGIL_API_READ_AUTH: 'true' },
  }, async ({ vigil, open }) => {
    await allOnline(vigil, 5);
    // The API itself refuses a read without the token; the page's files need none.
    assert.equal((await fetch(`${vigil.base}/api/v1/clusters`)).status, 401);
    for (const p of ['/', '/assets/app.js', '/assets/app.css']) {
      assert.equal((await fetch(`${vigil.base}${p}`)).status, 200, p);
    }

    const { page, record } = await open();
    await page.goto(`${vigil.base}/`);
    await page.waitForSelector('#login:not([hidden])');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'token');
    await screenshot(page, 'auth-form');

    // A wrong token is refused.
    await page.fill('#token', 'not-the-token-at-all');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.getElementById('login-error').textContent.includes('refused'));
    assert.equal(await page.locator('#login').isVisible(), true);

    await page.fill('#token', token);
    const signedIn = record.requests.length;
    await page.click('#login button');
    await page.waitForSelector('#fleet[data-rows-rendered]');
    await page.waitForSelector('#connection[data-state="live"]');
    assert.equal(await page.locator('#fleet tbody tr[data-cluster]').count(), 5);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('vigil-token')), token);
    assert.equal(await page.evaluate(() => localStorage.length), 0);
    assert.equal(await page.evaluate(() => document.cookie), '');

    // A change arrives on the stream, read with the token in its header.
    await vigil.api('PATCH', '/api/v1/clusters/cluster-00001', { labels: { team: 'payments' } });
    await page.waitForSelector('#recent li[data-kind="cluster-updated"]');

    // A reload keeps the session's token; the cluster view reads with it too.
    await page.reload();
    await page.waitForSelector('#fleet[data-rows-rendered]');
    await page.click('#fleet a >> text=cluster-00001');
    await page.waitForSelector('main h1 .status');
    assert.match(await page.locator('main').textContent(), /team=payments/);

    const leaks = record.requests.filter((r) => r.url.includes(token) || decodeURIComponent(r.url).includes(token));
    assert.deepEqual(leaks, [], 'a URL held the token');
    const stream = record.requests.filter((r) => new URL(r.url).pathname === '/api/v1/events');
    assert.ok(stream.length >= 2);
    assert.equal(stream.at(-1).headers.authorization, `Bearer ${token}`);
    const reads = record.requests.slice(signedIn).filter((r) => new URL(r.url).pathname.startsWith('/api/'));
    assert.ok(reads.length > 5);
    const without = reads.filter((r) => r.headers.authorization !== `Bearer ${token}`);
    assert.deepEqual(without.map((r) => r.url), [], 'every read after sign-in carries the token');
  });
});
