// Notifications that do not get through show on the page: a webhook sink whose receiver does
// not answer (nothing listens on its loopback port) fails its attempts, and the page says so
// without a reload, naming the sink and the error, and never its secret; then an axe check of
// the page with the notice shown.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import AxeBuilder from '@axe-core/playwright';
import { allOnline, freePort, scenario, screenshot } from '../lib/harness.mjs';

const SECRET = 'whsec_QmFzZTY0U2VjcmV0Rm9yVGVzdHNPbmx5MTI=';

test('a failing notification sink shows on the page, its secret never', { timeout: 300000 }, async () => {
  const port = await freePort();
  const env = (work) => {
    const secret = path.join(work, 'webhook.secret');
    fs.writeFileSync(secret, SECRET, { mode: 0o600 });
    const config = path.join(work, 'notify.toml');
    fs.writeFileSync(config, [
      '[delivery]', 'failing_after = 2', 'max_backoff = "1s"', '',
      '[[webhook]]', 'name = "ops-hook"', `url = "http://127.0.0.1:${port}/hook"`,
      `secret_file = "${secret}"`, 'timeout = "2s"', '',
    ].join('\n'));
    return { VIGIL_NOTIFY_CONFIG: config };
  };
  await scenario('notify', { clusters: 5, env }, async ({ fleet, vigil, open }) => {
    await allOnline(vigil, 5);
    const { page } = await open();
    // Every body the page receives, to scan for secrets.
    const bodies = [];
    page.on('response', async (response) => {
      try { bodies.push(await response.text()); } catch { /* a stream cut at the end */ }
    });
    await page.goto(`${vigil.base}/`);
    await page.waitForSelector('#fleet[data-rows-rendered]');
    await page.waitForSelector('#connection[data-state="live"]');
    assert.equal(await page.locator('#notify').isVisible(), false, 'nothing failed yet');

    const victim = (await vigil.clusters())[0].name;
    await fleet.refuse(victim);
    await page.waitForSelector('#notify:not([hidden]) li[data-sink="ops-hook"]', { timeout: 90000 });
    const notice = await page.locator('#notify').textContent();
    assert.match(notice, /ops-hook \(webhook\)/);
    assert.match(notice, /cannot connect to 127\.0\.0\.1/);
    // Neither the webhook secret nor any kubeconfig material (keys, certificates, tokens)
    // is on the page or in anything the page read.
    const secrets = [SECRET.slice('whsec_'.length)];
    for (const file of fs.readdirSync(fleet.kubeconfigs)) {
      const text = fs.readFileSync(path.join(fleet.kubeconfigs, file), 'utf8');
      for (const m of text.matchAll(/(?:-data|token):\s*(?:>-\s*)?"?([A-Za-z0-9+/=._-]{16,})/g)) secrets.push(m[1]);
    }
    assert.ok(secrets.length >= 10, `kubeconfig material found to scan for: ${secrets.length}`);
    const html = await page.content();
    for (const secret of secrets) {
      assert.ok(!html.includes(secret), 'a secret on the page');
      assert.ok(!bodies.some((b) => b.includes(secret)), 'a secret in what the page read');
    }
    assert.ok(bodies.length >= 4, `the page's reads were seen: ${bodies.length}`);
    await screenshot(page, 'notify-failing');
    const results = await new AxeBuilder({ page })
      .withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'])
      .analyze();
    assert.deepEqual(results.violations.map((v) => `${v.id}: ${v.help}`), []);
  });
});
